"""TOTP and recovery codes (contract §9): enrolment, the second step, removal."""

from __future__ import annotations

from authgate.services.assurance import Assurance
from authgate.services.context import Services

__all__ = ["MfaService"]


class MfaService:
    def __init__(self, services: Services, assurance: Assurance) -> None:
        self.sv = services
        self.assurance = assurance
