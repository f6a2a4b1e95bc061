import asyncio

from libs.bus import serve
from services.safety_out.service import setup
from services.safety_out.settings import SafetyOutSettings


def main() -> None:
    settings = SafetyOutSettings()
    asyncio.run(
        serve(
            "safety_out",
            settings.nats_url,
            lambda bus: setup(bus, settings),
            replica=settings.replica,
            log_level=settings.log_level,
        )
    )


if __name__ == "__main__":
    main()
