"""Rate limits shared by every gateway replica through a JetStream key-value bucket."""

from switchyard.libs.limits.limiter import Limiter, Limits, Refusal

__all__ = ["Limiter", "Limits", "Refusal"]
