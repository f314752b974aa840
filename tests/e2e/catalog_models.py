"""ClusterModel objects as the ai-models module would publish them, for the end-to-end tests."""

from __future__ import annotations

from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from inference_api.catalog_types import CATALOG_GROUP, CATALOG_VERSION, ModelFacts


class ClusterModels:
    """ClusterModel objects as the ai-models module would publish them (status through /status)."""

    def __init__(self, api: ApiClient) -> None:
        self.custom = CustomObjectsApi(api)
        self.made: list[str] = []

    def create(self, name: str, *, source: str, facts: ModelFacts, phase: str = "Ready") -> None:
        body = {
            "apiVersion": f"{CATALOG_GROUP}/{CATALOG_VERSION}",
            "kind": "ClusterModel",
            "metadata": {"name": name},
            "spec": {"source": source},
        }
        self.custom.create_cluster_custom_object(CATALOG_GROUP, CATALOG_VERSION, "clustermodels", body)
        self.made.append(name)
        status = {"phase": phase, "facts": facts.model_dump(mode="json", exclude_none=True)}
        self.custom.patch_cluster_custom_object_status(
            CATALOG_GROUP, CATALOG_VERSION, "clustermodels", name, {"status": status}
        )

    def delete_all(self) -> None:
        for name in self.made:
            try:
                self.custom.delete_cluster_custom_object(CATALOG_GROUP, CATALOG_VERSION, "clustermodels", name)
            except ApiException as err:
                if err.status != 404:
                    raise
