"""The shape of a CRD this module generates: names, scope, columns, the models of spec and status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from inference_api.types import GROUP, VERSION


def column(name: str, path: str, description: str, priority: int = 0, kind: str = "string") -> dict[str, Any]:
    col: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path, "description": description}
    if priority:
        col["priority"] = priority
    return col


@dataclass(frozen=True)
class CRDSpec:
    kind: str
    plural: str
    singular: str
    scope: str
    short_names: list[str]
    description: str
    spec_model: type[BaseModel]
    status_model: type[BaseModel] | None
    columns: list[dict[str, Any]]
    group: str = GROUP
    version: str = VERSION
    categories: list[str] = field(default_factory=lambda: ["ai-inference"])
    spec_required: bool = True
    # Write-time rules on the whole object (CEL sees metadata.name and metadata.generateName).
    root_rules: tuple[dict[str, str], ...] = ()
    # Stand-ins for another module's kinds carry a label saying so.
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"


AGE = column("Age", ".metadata.creationTimestamp", "Time since creation.", kind="date")
