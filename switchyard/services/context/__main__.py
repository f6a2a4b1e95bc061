from switchyard.libs.bus import run_service
from switchyard.services.context.service import setup
from switchyard.services.context.settings import ContextSettings

if __name__ == "__main__":
    run_service("context", ContextSettings(), setup)
