"""A resolved catalog model whose source the fetcher cannot download is refused in the model step
(``activities.order.fetchable``), not retried by the apply for ever (issue 23, day 2)."""

from __future__ import annotations

import pytest

from activities.order import fetchable
from inference_api.payloads import ModelResolution
from inference_api.reasons import Reason


@pytest.mark.parametrize("source", ["s3://models/qwen", "ollama://llama3", "https://example.com/model.gguf"])
def test_a_source_the_fetcher_cannot_download_is_refused_with_what_to_do(source: str) -> None:
    found = fetchable(ModelResolution(servedName="qwen", source=source), "qwen-s3")
    assert found.refusal == Reason.UNSUPPORTED_MODEL_SOURCE
    assert "'qwen-s3'" in found.message
    assert source in found.message
    assert "src: HuggingFace" in found.message


@pytest.mark.parametrize("source", ["hf://Qwen/Qwen2.5-0.5B-Instruct", "hf://org/repo@v1", "Qwen/Qwen2.5-0.5B"])
def test_a_hugging_face_source_passes(source: str) -> None:
    resolution = ModelResolution(servedName="qwen", source=source)
    assert fetchable(resolution, "qwen") == resolution


def test_a_refusal_or_no_source_is_left_as_it_is() -> None:
    refused = ModelResolution(servedName="x", refusal=Reason.MODEL_NOT_FOUND, message="no such model")
    assert fetchable(refused, "x") == refused
    assert fetchable(ModelResolution(servedName="x"), "x") == ModelResolution(servedName="x")
