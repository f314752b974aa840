"""DeviceClass selectors judged with a CEL library (cel-python), the way the DRA allocator judges them.

A DeviceClass selects devices with CEL expressions over ``device.driver``,
``device.attributes["<domain>"].<name>``, ``device.capacity["<domain>"].<name>`` (quantities) and
``device.allowMultipleAllocations``; all of a class's selectors must hold. The Kubernetes quantity
library is provided (``quantity()``, ``isQuantity()``, ``compareTo``, ``isGreaterThan``,
``isLessThan``, ``add``, ``sub``, ``asInteger``, ``asApproximateFloat``, ``sign``, ``isInteger``).

An expression that does not compile, fails on a device (a missing attribute, a type clash) or does
not yield a boolean makes the whole class undecidable. The DRA allocator fails a claim whose
selector errors on any device it considers, so a class that errors here could not be allocated
there either: the planner must not pretend it knows which devices the class holds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes

from planner.inventory import GPU_DRIVER, AttributeValue, Device, DeviceClass
from planner.quantity import Quantity, QuantityError, is_quantity

# ----------------------------------------------------------------- quantity library


def _q(value: Any) -> Quantity:
    if not isinstance(value, Quantity):
        # celpy turns TypeError into "no such overload", the CEL wording for a type clash.
        raise TypeError(f"expected a quantity, got {type(value).__name__}")
    return value


def _quantity(text: Any) -> Quantity:
    if not isinstance(text, str):
        raise TypeError("quantity() takes a string")
    try:
        return Quantity.parse(str(text))
    except QuantityError as exc:
        raise ValueError(str(exc)) from exc


def _is_quantity(text: Any) -> celtypes.BoolType:
    if not isinstance(text, str):
        raise TypeError("isQuantity() takes a string")
    return celtypes.BoolType(is_quantity(str(text)))


def _compare(a: Any, b: Any) -> celtypes.IntType:
    left, right = _q(a).value, _q(b).value
    return celtypes.IntType((left > right) - (left < right))


def _as_integer(a: Any) -> celtypes.IntType:
    value = _q(a).value
    if value.denominator != 1:
        raise ValueError("quantity is not an integer")
    return celtypes.IntType(int(value))


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": _compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(_q(a).value > _q(b).value),
    "isLessThan": lambda a, b: celtypes.BoolType(_q(a).value < _q(b).value),
    "add": lambda a, b: Quantity(_q(a).value + (Fraction(int(b)) if isinstance(b, int) else _q(b).value)),
    "sub": lambda a, b: Quantity(_q(a).value - (Fraction(int(b)) if isinstance(b, int) else _q(b).value)),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(_q(a).value)),
    "sign": lambda a: celtypes.IntType((_q(a).value > 0) - (_q(a).value < 0)),
    "isInteger": lambda a: celtypes.BoolType(_q(a).value.denominator == 1),
}

# ------------------------------------------------------------------ compile, cached

_ENV_LOCK = threading.Lock()
_ENV: celpy.Environment | None = None


def _environment() -> celpy.Environment:
    # Building the CEL parser is the expensive part; one environment serves every expression.
    global _ENV
    with _ENV_LOCK:
        if _ENV is None:
            _ENV = celpy.Environment()
        return _ENV


@dataclass(frozen=True)
class CompiledSelector:
    expression: str
    program: celpy.Runner | None = field(default=None, compare=False)
    error: str | None = None


@lru_cache(maxsize=2048)
def compile_selector(expression: str) -> CompiledSelector:
    """Compile once per expression text; a compile error is cached as well."""
    env = _environment()
    try:
        with _ENV_LOCK:
            ast = env.compile(expression)
            program = env.program(ast, functions=_FUNCTIONS)
    except Exception as exc:  # any parser failure means the expression cannot be judged
        return CompiledSelector(expression, error=_one_line(exc))
    return CompiledSelector(expression, program=program)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


# -------------------------------------------------------------------- device view


def _split(name: str, default_domain: str) -> tuple[str, str]:
    domain, _, bare = name.rpartition("/")
    return (domain or default_domain), bare


def _cel_value(value: AttributeValue) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    return celtypes.StringType(value)


def device_attributes(device: Device) -> dict[str, dict[str, AttributeValue]]:
    """Attributes by domain: the typed fields under the driver's domain, then the extras on top."""
    own: dict[str, AttributeValue] = {"placement": device.placement.value}
    if device.productName is not None:
        own["productName"] = device.productName
    if device.hardwareFamily is not None:
        own["hardwareFamily"] = device.hardwareFamily
    if device.memoryMiB is not None:
        own["memoryGiB"] = round(device.memoryMiB / 1024)
    if device.migProfile is not None:
        own["migProfile"] = device.migProfile
    by_domain: dict[str, dict[str, AttributeValue]] = {device.driver: own}
    for name, value in device.attributes.items():
        domain, bare = _split(name, device.driver)
        by_domain.setdefault(domain, {})[bare] = value
    return by_domain


def device_capacity(device: Device) -> dict[str, dict[str, Quantity]]:
    by_domain: dict[str, dict[str, Quantity]] = {device.driver: {}}
    if device.memoryMiB is not None:
        by_domain[device.driver]["memory"] = Quantity.from_mib(device.memoryMiB)
    for name, value in device.capacity.items():
        domain, bare = _split(name, device.driver)
        by_domain.setdefault(domain, {})[bare] = Quantity.of(value)
    return by_domain


def _cel_device(device: Device) -> celtypes.MapType:
    s = celtypes.StringType
    attributes = celtypes.MapType(
        {
            s(domain): celtypes.MapType({s(k): _cel_value(v) for k, v in values.items()})
            for domain, values in device_attributes(device).items()
        }
    )
    capacity = celtypes.MapType(
        {
            s(domain): celtypes.MapType({s(k): v for k, v in values.items()})
            for domain, values in device_capacity(device).items()
        }
    )
    return celtypes.MapType(
        {
            s("driver"): s(device.driver),
            s("attributes"): attributes,
            s("capacity"): capacity,
            s("allowMultipleAllocations"): celtypes.BoolType(device.allowMultipleAllocations),
        }
    )


# ---------------------------------------------------------------------- judgement


class SelectorError(Exception):
    """A selector that cannot be judged: the class is undecidable."""

    def __init__(self, device_class: str, expression: str, detail: str, device: str | None = None) -> None:
        self.device_class = device_class
        self.expression = expression
        self.detail = detail
        self.device = device
        where = f" on device {device}" if device else ""
        super().__init__(f"DeviceClass {device_class}: selector `{expression}` cannot be judged{where}: {detail}")


def _evaluate(compiled: CompiledSelector, activation: dict[str, Any]) -> bool:
    assert compiled.program is not None
    result = compiled.program.evaluate(activation)
    if isinstance(result, celpy.CELEvalError):  # some paths return the error instead of raising it
        raise result
    if not isinstance(result, celtypes.BoolType | bool):
        raise TypeError(f"the expression yields {type(result).__name__}, not a bool")
    return bool(result)


# Verdicts by (expression, what CEL sees of the device). CEL sees neither the device's name nor its
# node nor its allocations, so identical devices share a verdict within a plan, and a planner service
# judging many orders against a slowly changing inventory evaluates each selector once per device
# shape instead of once per plan. Interpreted CEL costs about a millisecond an evaluation.
_VERDICT_LIMIT = 65536
_VERDICTS: OrderedDict[tuple[str, Hashable], bool | str] = OrderedDict()
_VERDICTS_LOCK = threading.Lock()


def _view_key(device: Device) -> Hashable:
    """What CEL sees of the device, keyed by the fields it is built from (``device_attributes``,
    ``device_capacity``): cheap to build, no quantity parsed. Two spellings of one quantity ("80Gi",
    "81920Mi") key apart and are judged once each, which costs a cache entry, never a wrong verdict."""
    # The type name keeps True and 1 apart: Python hashes them alike, CEL does not.
    return (
        device.driver,
        device.allowMultipleAllocations,
        device.placement.value,
        device.productName,
        device.hardwareFamily,
        device.memoryMiB,
        device.migProfile,
        tuple(sorted((k, type(v).__name__, v) for k, v in device.attributes.items())),
        tuple(sorted((k, type(v).__name__, v) for k, v in device.capacity.items())),
    )


def _verdict(compiled: CompiledSelector, device: Device, key: Hashable) -> bool | str:
    """True/False, or the text of the error that makes the expression undecidable on this device."""
    cache_key = (compiled.expression, key)
    with _VERDICTS_LOCK:
        if cache_key in _VERDICTS:
            _VERDICTS.move_to_end(cache_key)
            return _VERDICTS[cache_key]
    verdict: bool | str
    # Outside the try: a device whose capacities are no quantities is a bug of whoever built the
    # snapshot (snapshots are validated when built), not a selector that cannot be judged.
    activation = {"device": _cel_device(device)}
    try:
        verdict = _evaluate(compiled, activation)
    except Exception as exc:  # celpy raises its own errors and Python's: all mean "cannot judge"
        verdict = _one_line(exc)
    with _VERDICTS_LOCK:
        _VERDICTS[cache_key] = verdict
        if len(_VERDICTS) > _VERDICT_LIMIT:
            _VERDICTS.popitem(last=False)
    return verdict


def clear_verdicts() -> None:
    with _VERDICTS_LOCK:
        _VERDICTS.clear()


def matches(device_class: DeviceClass, device: Device) -> bool:
    """Does the class select the device? Raises SelectorError when that cannot be judged."""
    key = _view_key(device)
    for expression in device_class.selectors:
        compiled = compile_selector(expression)
        if compiled.error is not None:
            raise SelectorError(device_class.name, expression, compiled.error)
        verdict = _verdict(compiled, device, key)
        if isinstance(verdict, str):
            raise SelectorError(device_class.name, expression, verdict, device.key)
        if not verdict:
            return False
    return True


@dataclass(frozen=True)
class ClassSelection:
    """The devices a class selects, or why it cannot be judged."""

    deviceClass: str
    devices: tuple[Device, ...] = ()
    error: SelectorError | None = None

    @property
    def decidable(self) -> bool:
        return self.error is None


def select_devices(device_class: DeviceClass, devices: Sequence[Device]) -> ClassSelection:
    # Compile every expression first: a broken expression is undecidable even on an empty cluster.
    for expression in device_class.selectors:
        compiled = compile_selector(expression)
        if compiled.error is not None:
            return ClassSelection(device_class.name, error=SelectorError(device_class.name, expression, compiled.error))
    chosen: list[Device] = []
    # Identical devices (same view) share a verdict: judge each view once per call.
    seen: dict[Hashable, bool] = {}
    for device in devices:
        key = _view_key(device)
        verdict = seen.get(key)
        if verdict is None:
            try:
                verdict = seen[key] = matches(device_class, device)
            except SelectorError as exc:
                return ClassSelection(device_class.name, error=exc)
        if verdict:
            chosen.append(device)
    return ClassSelection(device_class.name, devices=tuple(chosen))


__all__ = [
    "GPU_DRIVER",
    "ClassSelection",
    "CompiledSelector",
    "SelectorError",
    "clear_verdicts",
    "compile_selector",
    "device_attributes",
    "device_capacity",
    "matches",
    "select_devices",
]
