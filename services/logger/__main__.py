from libs.bus import run_service
from services.logger.service import setup
from services.logger.settings import LoggerSettings

if __name__ == "__main__":
    run_service("logger", LoggerSettings(), setup)
