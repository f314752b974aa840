"""A rotated endpoint token reaches the replicas: the pod template names the token Secret's uid."""

from __future__ import annotations

import dataclasses

from activities.builders import build_statefulset
from activities.builders.common import ANNOTATION_AUTH_SECRET_UID
from tests.factories import UID, external_token_certmanager, inputs


def _pod_annotations(uid: str | None) -> dict[str, str]:
    built = build_statefulset(dataclasses.replace(inputs(the_class=external_token_certmanager()), auth_secret_uid=uid))
    annotations: dict[str, str] = built["spec"]["template"]["metadata"]["annotations"]
    return annotations


def test_a_new_token_secret_changes_the_pod_template() -> None:
    first = _pod_annotations("secret-uid-1")
    rotated = _pod_annotations("secret-uid-2")
    assert first[ANNOTATION_AUTH_SECRET_UID] == "secret-uid-1"
    assert rotated[ANNOTATION_AUTH_SECRET_UID] == "secret-uid-2"
    # Only the Secret's uid differs: the StatefulSet controller rolls the replicas, nothing else moves.
    assert {k: v for k, v in first.items() if k != ANNOTATION_AUTH_SECRET_UID} == {
        k: v for k, v in rotated.items() if k != ANNOTATION_AUTH_SECRET_UID
    }
    assert UID not in first.values()


def test_the_token_itself_is_never_in_the_pod_template() -> None:
    built = build_statefulset(inputs(the_class=external_token_certmanager()))
    assert ANNOTATION_AUTH_SECRET_UID not in built["spec"]["template"]["metadata"]["annotations"]
