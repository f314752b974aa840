"""A class says what it names that the cluster lacks, against the real local control plane: a class
naming a DeviceClass, a PriorityClass or a StorageClass that does not exist is Ready=False with the
kind's reason and a message naming it (Validated stays True); the object created, the class turns
Ready by itself — the watcher informs on those kinds. ``lastTransitionTime`` moves only on a flip.

(The cert-manager ClusterIssuer, whose CRD the shared cluster does not have, is in
tests/e2e/test_without_other_modules.py, on a control plane of its own.)"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient, CustomObjectsApi

from inference_api.types import CLASSES, GROUP, VERSION
from tests.observer.class_watch import class_body, class_watch, delete_quietly, phase, until_ready

pytestmark = pytest.mark.cluster


def device_class(name: str) -> dict[str, Any]:
    # Selects nothing: the planner of another test never finds a device through it.
    selector = {"cel": {"expression": "device.driver == 'class-references.test.invalid'"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [selector]},
    }


# kind -> (what the class says, the reason, (group, version, plural), the object)
CASES: dict[str, tuple[Callable[[str], dict[str, Any]], str, tuple[str, str, str], Callable[[str], dict[str, Any]]]] = {
    "DeviceClass": (
        lambda n: {"acceleratorPolicy": {"allowedDeviceClasses": [n]}},
        "DeviceClassNotFound",
        ("resource.k8s.io", "v1", "deviceclasses"),
        device_class,
    ),
    "PriorityClass": (
        lambda n: {"scalingPolicy": {"minReplicas": 1, "maxReplicas": 2, "allowedPriorityClassNames": [n]}},
        "PriorityClassNotFound",
        ("scheduling.k8s.io", "v1", "priorityclasses"),
        lambda n: {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": 7},
    ),
    "StorageClass": (
        lambda n: {"modelStorageClassName": n},
        "StorageClassNotFound",
        ("storage.k8s.io", "v1", "storageclasses"),
        lambda n: {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": n},
            "provisioner": "kubernetes.io/no-provisioner",
        },
    ),
}


@pytest.mark.parametrize("kind", list(CASES))
async def test_a_class_naming_a_missing_object_is_not_ready_until_it_exists(
    kube_admin: ApiClient, namespace: str, kind: str
) -> None:
    names, reason, (group, version, plural), body = CASES[kind]
    custom = CustomObjectsApi(kube_admin)
    suffix = uuid.uuid4().hex[:6]
    class_name, referenced = f"refs-{kind.lower()}-{suffix}", f"refs-missing-{suffix}"
    custom.create_cluster_custom_object(GROUP, VERSION, CLASSES, class_body(class_name, **names(referenced)))
    try:
        async with class_watch(kube_admin, namespace):
            before = await until_ready(kube_admin, class_name, "False", reason)
            message = before["Ready"]["message"]
            assert f'{kind} "{referenced}", which does not exist: create it' in message, message
            assert (before["Validated"]["status"], before["Validated"]["reason"]) == ("True", "ClassValid")
            assert phase(kube_admin, class_name) == "Pending"

            custom.create_cluster_custom_object(group, version, plural, body(referenced))
            after = await until_ready(kube_admin, class_name, "True", "ClassValid")
            assert phase(kube_admin, class_name) == "Ready"
            # Ready flipped: its time moved; Validated did not: its time stayed.
            assert after["Validated"]["lastTransitionTime"] == before["Validated"]["lastTransitionTime"]
            assert after["Ready"]["lastTransitionTime"] >= before["Ready"]["lastTransitionTime"]
            assert after["Ready"]["message"].startswith("the class is valid and everything it names exists")

            # The object goes again: so does Ready.
            custom.delete_cluster_custom_object(group, version, plural, referenced)
            await until_ready(kube_admin, class_name, "False", reason)
    finally:
        delete_quietly(lambda: custom.delete_cluster_custom_object(GROUP, VERSION, CLASSES, class_name))
        delete_quietly(lambda: custom.delete_cluster_custom_object(group, version, plural, referenced))
