import asyncio

from libs.bus import serve
from services.logger.service import setup
from services.logger.settings import LoggerSettings

settings = LoggerSettings()
asyncio.run(
    serve(
        "logger",
        settings.nats_url,
        lambda bus: setup(bus, settings),
        replica=settings.replica,
        log_level=settings.log_level,
    )
)
