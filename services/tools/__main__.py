import asyncio

from libs.bus import serve
from services.tools.service import setup
from services.tools.settings import ToolsSettings


def main() -> None:
    settings = ToolsSettings()
    asyncio.run(
        serve(
            "tools",
            settings.nats_url,
            lambda bus: setup(bus, settings),
            replica=settings.replica,
            log_level=settings.log_level,
        )
    )


if __name__ == "__main__":
    main()
