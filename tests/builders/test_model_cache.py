"""The namespace's model cache in the built objects (``workload.modelCache``): off, nothing of it;
on, the fetcher (and only the fetcher) mounts the namespace's claim and is told where, and the
claim itself is ReadWriteMany, the module's, and owned by no order."""

from __future__ import annotations

from activities.builders import desired_objects
from activities.builders.common import LABEL_MANAGED_BY, LABEL_ORDER, MANAGED_BY
from activities.builders.statefulset import MODEL_CACHE_PATH, build_model_cache_claim, build_statefulset
from inference_api.settings import ModuleSettings
from tests import factories as f

ON = ModuleSettings.model_validate(
    {"workload": {"modelCache": {"enabled": True, "storageClassName": "cephfs", "size": "500Gi"}}}
)


def test_without_the_cache_nothing_of_it_is_built() -> None:
    inputs = f.inputs()
    pod = build_statefulset(inputs)["spec"]["template"]["spec"]
    assert "model-cache" not in {v["name"] for v in pod["volumes"]}
    assert "MODEL_CACHE_DIR" not in {e["name"] for e in f.fetcher_container(build_statefulset(inputs))["env"]}
    assert build_model_cache_claim(inputs) is None
    assert all(o.kind != "PersistentVolumeClaim" for o in desired_objects(inputs))


def test_with_the_cache_the_fetcher_alone_mounts_the_namespaces_claim() -> None:
    inputs = f.inputs(settings=ON)
    sts = build_statefulset(inputs)
    pod = sts["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "model-cache"]
    assert volume == {"name": "model-cache", "persistentVolumeClaim": {"claimName": "ai-inference-model-cache"}}
    fetcher = f.fetcher_container(sts)
    assert {"name": "model-cache", "mountPath": MODEL_CACHE_PATH} in fetcher["volumeMounts"]
    assert {"name": "MODEL_CACHE_DIR", "value": MODEL_CACHE_PATH} in fetcher["env"]
    for container in pod["containers"]:  # the engine reads its own volume only
        assert "model-cache" not in {m["name"] for m in container.get("volumeMounts") or []}


def test_the_cache_claim_is_the_namespaces_made_once_and_owned_by_no_order() -> None:
    inputs = f.inputs(settings=ON)
    claim = build_model_cache_claim(inputs)
    assert claim is not None
    assert claim["metadata"]["namespace"] == inputs.namespace
    assert claim["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY
    assert LABEL_ORDER not in claim["metadata"]["labels"]  # never pruned with an order
    assert "ownerReferences" not in claim["metadata"]  # never collected with an order
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "cephfs",
        "resources": {"requests": {"storage": "500Gi"}},
    }
    (wanted,) = [o for o in desired_objects(inputs) if o.kind == "PersistentVolumeClaim"]
    assert wanted.create_only  # made when absent, never changed
