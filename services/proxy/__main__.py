"""`python -m services.proxy`"""

from services.proxy.app import create_app
from shared.serving.service import serve
from shared.settings import load_settings
from shared.telemetry.logging import configure_logging


def main() -> None:
    configure_logging("proxy")
    settings = load_settings()
    serve(create_app(settings), settings.server.host, settings.server.proxy_port, settings, public=True)


if __name__ == "__main__":
    main()
