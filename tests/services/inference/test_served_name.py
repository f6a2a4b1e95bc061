"""The name a replica serves its model by, when its settings give none."""

from __future__ import annotations

from switchyard.services.inference.service import served_name


def test_a_gguf_loses_its_quantization_suffix_and_a_directory_keeps_its_name(tmp_path):
    assert served_name("/models/SmolLM2-135M-Instruct.Q4_1.gguf") == "SmolLM2-135M-Instruct"
    d = tmp_path / "Qwen2.5-0.5B-Instruct"
    d.mkdir()
    assert served_name(str(d)) == served_name(f"{d}/") == "Qwen2.5-0.5B-Instruct"
