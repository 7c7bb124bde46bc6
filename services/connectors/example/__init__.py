"""The example connector: a brand-asset library (colours and images from a directory)."""
