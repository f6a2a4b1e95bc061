from switchyard.libs.bus import run_service
from switchyard.services.logger.service import setup
from switchyard.services.logger.settings import LoggerSettings

if __name__ == "__main__":
    run_service("logger", LoggerSettings(), setup)
