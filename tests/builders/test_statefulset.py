"""The StatefulSet: runtime command, secrets by reference, fetcher, volume, probes, replicas."""

from __future__ import annotations

import json

import pytest

from activities.builders import (
    UnsupportedModelSourceError,
    artifact_for_order,
    build_statefulset,
)
from activities.builders.endpoint_front import engine_probe_script
from activities.builders.fetcher import FETCH_PROGRAM, FETCH_SCRIPT
from activities.builders.statefulset import (
    endpoint_args,
    startup_failure_threshold,
    strip_reserved_flags,
)
from inference_api.payloads import ModelResolution
from inference_api.types import EndpointType
from tests import factories as f

MODEL = "Qwen/Qwen2.5-32B-Instruct-AWQ"


def test_runtime_command_is_vllm_serve_with_fixed_flags_then_recipe_args() -> None:
    sts = build_statefulset(f.inputs())
    runtime = f.runtime_container(sts)
    assert runtime["image"] == "vllm/vllm-openai:v0.33.0"
    assert runtime["command"] == [
        "vllm",
        "serve",
        f"/models/{MODEL}",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--served-model-name",
        MODEL,
        "--max-model-len",
        "8192",
        "--gpu-memory-utilization",
        "0.9",
    ]
    assert "args" not in runtime
    # The pod's port is the endpoint front's (tests/builders/test_endpoint_guard.py).
    assert "ports" not in runtime


def test_recipe_cannot_move_the_port_rename_the_model_or_carry_a_key() -> None:
    recipe_args = ["--port", "9000", "--api-key=leak", "--served-model-name", "a", "b", "--enforce-eager", "--host=x"]
    sts = build_statefulset(f.inputs(the_plan=f.plan(args=recipe_args)))
    command = f.runtime_container(sts)["command"]
    assert command[command.index("--port") + 1] == "8001"
    assert command.count("--port") == 1
    assert command.count("--served-model-name") == 1
    assert "--enforce-eager" in command
    assert not any("api-key" in part or part == "leak" for part in command)
    assert "--host=x" not in command


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--port", "1", "--x"], ["--x"]),
        (["--port=1", "--x", "2"], ["--x", "2"]),
        (["--served-model-name", "a", "b", "--y"], ["--y"]),
        (["--model", "m", "--port", "1"], []),
        (["--x", "--api-key", "k"], ["--x"]),
        ([], []),
    ],
)
def test_strip_reserved_flags(args: list[str], expected: list[str]) -> None:
    assert strip_reserved_flags(args) == expected


def test_token_class_passes_the_key_from_the_auth_secret_never_as_a_value() -> None:
    sts = build_statefulset(f.inputs())
    env = f.env_map(f.runtime_container(sts))
    assert env["VLLM_API_KEY"] == {"secretKeyRef": {"name": "support-llm-auth", "key": "token"}}
    assert "--api-key" not in json.dumps(sts)
    assert f.TOKEN not in json.dumps(sts)


def test_token_class_readiness_is_an_exec_probe_reading_the_env_not_a_header_in_the_spec() -> None:
    runtime = f.runtime_container(build_statefulset(f.inputs()))
    readiness = runtime["readinessProbe"]
    script = engine_probe_script("/v1/models", with_token=True)
    assert readiness["exec"]["command"] == ["python3", "-c", script]
    assert "/v1/models" in script
    assert "os.environ['VLLM_API_KEY']" in script
    assert "httpHeaders" not in json.dumps(runtime)


def test_no_auth_class_has_no_key_and_readiness_on_v1_models() -> None:
    sts = build_statefulset(f.inputs(the_class=f.cluster_local_none()))
    runtime = f.runtime_container(sts)
    assert "VLLM_API_KEY" not in f.env_map(runtime)
    assert runtime["readinessProbe"]["exec"]["command"] == ["python3", "-c", engine_probe_script("/v1/models", False)]


def test_liveness_and_startup_use_health() -> None:
    runtime = f.runtime_container(build_statefulset(f.inputs()))
    health = ["python3", "-c", engine_probe_script("/health", False)]
    assert runtime["startupProbe"]["exec"]["command"] == health
    assert runtime["livenessProbe"]["exec"]["command"] == health


def test_startup_budget_grows_with_the_model_volume() -> None:
    small = f.runtime_container(build_statefulset(f.inputs(the_plan=f.plan(volume_gib=10))))
    large = f.runtime_container(build_statefulset(f.inputs(the_plan=f.plan(volume_gib=400))))
    small_budget = small["startupProbe"]["failureThreshold"] * small["startupProbe"]["periodSeconds"]
    large_budget = large["startupProbe"]["failureThreshold"] * large["startupProbe"]["periodSeconds"]
    assert small_budget >= 600  # at least ten minutes for any model
    assert large_budget > small_budget
    assert large_budget >= 400 * 20
    assert startup_failure_threshold(40) == 140


def test_recipe_env_is_kept_sorted_and_cannot_set_the_api_key() -> None:
    env_in = {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_API_KEY": "nope", "A_FIRST": "1"}
    sts = build_statefulset(f.inputs(the_plan=f.plan(env=env_in)))
    runtime = f.runtime_container(sts)
    names = [item["name"] for item in runtime["env"]]
    plain = [item["name"] for item in runtime["env"] if "value" in item]
    assert plain == sorted(plain)
    assert names[-1] == "VLLM_API_KEY"
    env = f.env_map(runtime)
    assert env["VLLM_ATTENTION_BACKEND"] == "FLASHINFER"
    assert env["VLLM_API_KEY"] == {"secretKeyRef": {"name": "support-llm-auth", "key": "token"}}
    assert env["HF_HUB_OFFLINE"] == "1"
    assert "nope" not in json.dumps(sts)


def test_resources_come_from_the_plan_and_the_claim() -> None:
    sts = build_statefulset(f.inputs())
    resources = f.runtime_container(sts)["resources"]
    assert resources["requests"] == {"cpu": "4", "memory": "32Gi"}
    assert resources["limits"] == {"memory": "32Gi"}
    assert resources["claims"] == [{"name": "accelerator"}]
    pod = sts["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "accelerator", "resourceClaimTemplateName": "support-llm-claim"}]


def test_fetcher_downloads_into_the_model_volume_with_the_users_token_by_reference() -> None:
    the_order = f.order(auth_secret={"name": "hf-token", "key": "hf"})
    sts = build_statefulset(f.inputs(the_order=the_order))
    fetcher = f.fetcher_container(sts)
    env = f.env_map(fetcher)
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "hf"}}
    assert env["MODEL_REPOSITORY"] == MODEL
    assert env["MODEL_DIR"] == f"/models/{MODEL}"
    assert fetcher["volumeMounts"] == [
        {"name": "model", "mountPath": "/models"},
        {"name": "home", "mountPath": "/home/ai-inference"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    script = fetcher["command"][2]
    assert fetcher["command"][:2] == ["/bin/sh", "-c"]
    assert script == FETCH_SCRIPT
    # The image's CLI (hf, or huggingface-cli on older images), and the program its Python runs around it.
    assert "hf=hf" in script
    assert "hf=huggingface-cli" in script
    assert '"$hf" download' in script
    assert FETCH_PROGRAM in script
    # The order's values reach the script only through the environment.
    assert MODEL not in script
    # Its log is read by people and by the observer: no PyPI update check, progress bars or colours in it.
    assert env["HF_HUB_DISABLE_UPDATE_CHECK"] == "1"
    assert env["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert env["NO_COLOR"] == "1"


def test_auth_secret_ref_default_key_is_token() -> None:
    the_order = f.order(auth_secret={"name": "hf-token"})
    env = f.env_map(f.fetcher_container(build_statefulset(f.inputs(the_order=the_order))))
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}


def test_no_auth_secret_ref_means_no_hf_token() -> None:
    sts = build_statefulset(f.inputs())
    assert "HF_TOKEN" not in f.env_map(f.fetcher_container(sts))
    assert "HF_TOKEN" not in f.env_map(f.runtime_container(sts))


def test_catalog_model_is_fetched_from_the_catalog_source_and_served_under_its_name() -> None:
    the_order = f.order(catalog={"kind": "Model", "name": "e5-large", "namespace": "team-a"})
    resolution = ModelResolution(servedName="intfloat/multilingual-e5-large", source="hf://intfloat/e5-large@abc123")
    from activities.builders import artifact_from_resolution

    artifact = artifact_from_resolution(the_order, resolution)
    sts = build_statefulset(f.inputs(the_order=the_order, artifact=artifact, endpoint_type=EndpointType.EMBEDDINGS))
    env = f.env_map(f.fetcher_container(sts))
    assert env["MODEL_REPOSITORY"] == "intfloat/e5-large"
    assert env["MODEL_REVISION"] == "abc123"

    command = f.runtime_container(sts)["command"]
    assert command[2] == "/models/intfloat/e5-large"
    assert command[command.index("--served-model-name") + 1] == "intfloat/multilingual-e5-large"
    # The namespace of a kind: Model reference does not travel into the workload.
    assert "team-a" not in json.dumps(sts)


def test_every_replica_fetches_the_commit_the_plan_pinned() -> None:
    commit = "3" * 40
    plan = f.make_plan().model_copy(update={"modelCommit": commit})
    env = f.env_map(f.fetcher_container(build_statefulset(f.inputs(the_plan=plan))))
    assert env["MODEL_REVISION"] == commit
    # A catalog's own revision gives way to the commit pinned from it.
    the_order = f.order(catalog={"kind": "Model", "name": "e5-large", "namespace": "team-a"})
    from activities.builders import artifact_from_resolution

    artifact = artifact_from_resolution(the_order, ModelResolution(servedName="e5", source="hf://intfloat/e5@v2"))
    inputs = f.inputs(the_order=the_order, artifact=artifact, the_plan=plan, endpoint_type=EndpointType.EMBEDDINGS)
    assert f.env_map(f.fetcher_container(build_statefulset(inputs)))["MODEL_REVISION"] == commit
    # Not pinned: the reference's own (none for a bare repository: the fetcher resolves main).
    assert "MODEL_REVISION" not in f.env_map(f.fetcher_container(build_statefulset(f.inputs())))


def test_catalog_model_without_a_fetchable_source_is_refused() -> None:
    the_order = f.order(catalog={"kind": "ClusterModel", "name": "qwen"})
    with pytest.raises(UnsupportedModelSourceError):
        artifact_for_order(the_order)
    with pytest.raises(UnsupportedModelSourceError):
        artifact_for_order(the_order, catalog_source="s3://bucket/qwen")


def test_model_volume_template_sized_from_the_plan_on_the_class_storage_class() -> None:
    sts = build_statefulset(f.inputs(the_class=f.external_token_certmanager(modelStorageClassName="fast-nvme")))
    (template,) = sts["spec"]["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "model"
    assert template["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "fast-nvme",
        "resources": {"requests": {"storage": "40Gi"}},
    }


def test_no_storage_class_on_the_class_leaves_the_cluster_default() -> None:
    (template,) = build_statefulset(f.inputs())["spec"]["volumeClaimTemplates"]
    assert "storageClassName" not in template["spec"]


def test_standing_claim_template_is_kept_verbatim() -> None:
    standing_template = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "model", "creationTimestamp": None},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "old-hdd",
            "resources": {"requests": {"storage": "40Gi"}},
            "volumeMode": "Filesystem",
        },
        "status": {"phase": "Pending"},
    }
    standing = {"spec": {"volumeClaimTemplates": [standing_template]}}
    the_inputs = f.inputs(
        the_class=f.external_token_certmanager(modelStorageClassName="new-ssd"), standing_statefulset=standing
    )
    sts = build_statefulset(the_inputs)
    assert sts["spec"]["volumeClaimTemplates"] == [standing_template]
    assert sts["spec"]["volumeClaimTemplates"][0] is not standing_template  # a copy, not the caller's dict


def test_priority_class_is_the_first_allowed() -> None:
    pod = build_statefulset(f.inputs(the_class=f.strict_class()))["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "inference-normal"
    pod = build_statefulset(f.inputs(the_class=f.cluster_local_none()))["spec"]["template"]["spec"]
    assert "priorityClassName" not in pod


def test_no_scaling_policy_means_one_replica() -> None:
    sts = build_statefulset(f.inputs(the_class=f.cluster_local_none()))
    assert sts["spec"]["replicas"] == 1


def test_a_ceiling_of_one_replica_sets_replicas_directly() -> None:
    the_class = f.cluster_local_none(scalingPolicy={"minReplicas": 1, "maxReplicas": 1})
    assert build_statefulset(f.inputs(the_class=the_class))["spec"]["replicas"] == 1


def test_min_equal_max_above_one_is_still_the_hpas() -> None:
    # "maxReplicas > 1 → HPA": the HPA holds 2..2, and the StatefulSet leaves replicas to it.
    the_class = f.cluster_local_none(scalingPolicy={"minReplicas": 2, "maxReplicas": 2})
    assert "replicas" not in build_statefulset(f.inputs(the_class=the_class))["spec"]


def test_replicas_left_to_the_hpa_when_the_class_autoscales() -> None:
    sts = build_statefulset(f.inputs(the_class=f.external_token_certmanager()))
    assert "replicas" not in sts["spec"]


def test_update_strategy_follows_the_class_unless_held() -> None:
    on_delete = f.cluster_local_none(updatePolicy={"strategy": "OnDelete"})
    assert build_statefulset(f.inputs(the_class=on_delete))["spec"]["updateStrategy"] == {"type": "OnDelete"}
    rolling = build_statefulset(f.inputs())
    # The partition named (tests/cluster/test_statefulset_update.py): a replica made again comes from the template.
    assert rolling["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert rolling["metadata"]["annotations"]["ai.deckhouse.io/runtime-hold"] == "false"
    held = build_statefulset(f.inputs(hold_running_replicas=True))
    assert held["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert held["metadata"]["annotations"]["ai.deckhouse.io/runtime-hold"] == "true"


def test_pod_template_records_the_runtime_release_generation_and_placement() -> None:
    sts = build_statefulset(
        f.inputs(the_order=f.order(generation=7), the_plan=f.plan(share=50, memory_request_mib=1024))
    )
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["ai.deckhouse.io/runtime-version"] == "0.33.0"
    assert annotations["ai.deckhouse.io/runtime-image"] == "vllm/vllm-openai:v0.33.0"
    assert annotations["ai.deckhouse.io/order-generation"] == "7"
    assert json.loads(annotations["ai.deckhouse.io/placement"]) == {
        "deviceClass": "nvidia-h100-mps-mig",
        "deviceCount": 1,
        "memoryRequestMiB": 1024,
        "modelVolumeGiB": 40,
        "sharePercent": 50,
    }


def test_selector_is_the_order_label_and_matches_the_pod_labels() -> None:
    sts = build_statefulset(f.inputs())
    selector = sts["spec"]["selector"]["matchLabels"]
    assert selector == {"ai.deckhouse.io/inference-service": "support-llm"}
    assert selector.items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert sts["spec"]["serviceName"] == "support-llm"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Retain"}


def test_pod_hardening() -> None:
    pod = build_statefulset(f.inputs())["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False
    assert pod["automountServiceAccountToken"] is False


RESTRICTED_VOLUME_KINDS = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


@pytest.mark.parametrize(
    "the_class",
    [f.external_token_certmanager(), f.cluster_local_none(), f.strict_class()],
    ids=["external-token", "cluster-local", "strict"],
)
def test_pods_meet_the_restricted_pod_security_profile(the_class: object) -> None:
    """The checks of Pod Security `restricted` (the cluster test asks the real API server too)."""
    pod = build_statefulset(f.inputs(the_class=the_class))["spec"]["template"]["spec"]  # type: ignore[arg-type]
    pod_context = pod["securityContext"]
    assert pod_context["runAsNonRoot"] is True
    assert pod_context["runAsUser"] == pod_context["runAsGroup"] == pod_context["fsGroup"] == 1000
    assert pod_context["fsGroupChangePolicy"] == "OnRootMismatch"
    assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}
    for key in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        assert key not in pod, key
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= RESTRICTED_VOLUME_KINDS, volume
    containers = pod["initContainers"] + pod["containers"]
    assert [c["name"] for c in containers] == ["model-fetcher", "runtime", "endpoint-front"]
    for container in containers:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert context["runAsNonRoot"] is True, container["name"]
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, container["name"]
        assert "privileged" not in context
        assert "runAsUser" not in context
        for port in container.get("ports", []):
            assert "hostPort" not in port


def test_what_vllm_writes_goes_to_volumes_the_non_root_uid_can_write() -> None:
    sts = build_statefulset(f.inputs(the_plan=f.plan(env={"HOME": "/root", "USER": "root"})))
    pod = sts["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["home"] == {"name": "home", "emptyDir": {"sizeLimit": "10Gi"}}
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {"sizeLimit": "10Gi"}}
    # The model volume is writable through fsGroup; it holds the persistent caches.
    templates = [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]]
    assert templates == ["model"]
    for container in (f.runtime_container(sts), f.fetcher_container(sts)):
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["model"] == "/models"
        assert mounts["home"] == "/home/ai-inference"
        assert mounts["tmp"] == "/tmp"
        env = f.env_map(container)
        # A recipe cannot move HOME back to the root-owned /root.
        assert env["HOME"] == "/home/ai-inference"
        assert env["USER"] == "ai-inference"
        assert env["HF_HOME"] == "/models/.hf-home"
    runtime_env = f.env_map(f.runtime_container(sts))
    assert runtime_env["VLLM_CACHE_ROOT"] == "/models/.vllm-cache"
    assert {m["mountPath"] for m in f.runtime_container(sts)["volumeMounts"]} >= {"/dev/shm"}


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        (EndpointType.CHAT, []),
        (EndpointType.EMBEDDINGS, ["--runner", "pooling", "--convert", "embed"]),
        (EndpointType.RERANK, ["--runner", "pooling", "--convert", "classify"]),
    ],
)
def test_endpoint_type_selects_the_runner(endpoint: EndpointType, expected: list[str]) -> None:
    assert endpoint_args(endpoint, []) == expected


def test_the_removed_task_flag_is_never_passed() -> None:
    # vLLM 0.33 refuses --task; the pooling runner is chosen with --runner/--convert only.
    for endpoint in EndpointType:
        sts = build_statefulset(f.inputs(endpoint_type=endpoint))
        assert "--task" not in f.runtime_container(sts)["command"]


def test_recipe_that_names_the_runner_wins() -> None:
    assert endpoint_args(EndpointType.EMBEDDINGS, ["--convert=embed"]) == []
    sts = build_statefulset(
        f.inputs(the_plan=f.plan(args=["--runner", "pooling"]), endpoint_type=EndpointType.EMBEDDINGS)
    )
    assert f.runtime_container(sts)["command"].count("--runner") == 1


def test_several_devices_split_the_model_unless_the_recipe_says_how() -> None:
    command = f.runtime_container(build_statefulset(f.inputs(the_plan=f.plan(device_count=2))))["command"]
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    command = f.runtime_container(build_statefulset(f.inputs(the_plan=f.plan(device_count=2, args=["-tp", "2"]))))[
        "command"
    ]
    assert "--tensor-parallel-size" not in command
    single = f.runtime_container(build_statefulset(f.inputs()))["command"]
    assert "--tensor-parallel-size" not in single


def test_output_is_deterministic() -> None:
    first = json.dumps(build_statefulset(f.inputs()))
    second = json.dumps(build_statefulset(f.inputs()))
    assert first == second
