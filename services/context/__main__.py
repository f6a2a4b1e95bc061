import asyncio

from libs.bus import serve
from services.context.service import setup
from services.context.settings import ContextSettings

settings = ContextSettings()
asyncio.run(
    serve(
        "context",
        settings.nats_url,
        lambda bus: setup(bus, settings),
        replica=settings.replica,
        log_level=settings.log_level,
    )
)
