"""The scripted model: the offline stand-in for an OpenAI model, a test double kept out of the production
packages (import-linter forbids shared/, services/ and tools/ to import it; services/stack.py, the dev
launcher, wires it). scripted/README.md describes its parts and settings."""

# GAMMA_MODEL_FACTORY's value that selects it (shared/serving/model.py loads a factory by this name).
FACTORY = "scripted.factory:model_factory"
