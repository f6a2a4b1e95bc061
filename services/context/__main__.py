from libs.bus import run_service
from services.context.service import setup
from services.context.settings import ContextSettings

if __name__ == "__main__":
    run_service("context", ContextSettings(), setup)
