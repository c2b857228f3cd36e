"""Passkeys (contract §9): registration and sign-in ceremonies, the user's list."""

from __future__ import annotations

from authgate.services.assurance import Assurance
from authgate.services.context import Services

__all__ = ["PasskeyService"]


class PasskeyService:
    def __init__(self, services: Services, assurance: Assurance) -> None:
        self.sv = services
        self.assurance = assurance
