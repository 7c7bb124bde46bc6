"""`python -m services.digest`"""

from services.digest.app import create_app
from shared.serving.service import serve
from shared.settings import load_settings
from shared.telemetry.logging import configure_logging


def main() -> None:
    configure_logging("digest")
    settings = load_settings()
    serve(create_app(settings), settings.server.host, settings.server.digest_port)


if __name__ == "__main__":
    main()
