from __future__ import annotations

from pytest_sglang.server.schemas import describe_violations, violations

CARD = {"id": "m", "object": "model", "created": 1, "owned_by": "sglang", "root": "m",
        "parent": None, "max_model_len": 4096}  # fmt: skip


def test_a_valid_body_has_no_violations() -> None:
    body = {"object": "list", "data": [CARD]}
    assert violations(body, "v1_models") == []
    assert describe_violations(body, "v1_models") is None


def test_every_violation_is_listed_with_the_body_around_it() -> None:
    card = {**CARD, "id": 5, "max_model_len": "4096", "padding": list(range(200))}
    text = describe_violations({"object": "list", "data": [card]}, "v1_models")
    assert text is not None
    assert text.startswith("2 violations of v1_models.schema.json:")
    assert "at $.data[0].id: 5 is not of type 'string'" in text
    assert "at $.data[0].max_model_len: '4096' is not of type 'integer', 'null'" in text
    # The excerpt is cut around the violating key, not inside the unrelated list.
    excerpt = next(line for line in text.splitlines() if '"max_model_len": "4096"' in line)
    assert excerpt.strip().startswith("in: …") and len(excerpt) < 200


def test_the_list_is_capped_and_says_so() -> None:
    cards = [{**CARD, "created": "x"} for _ in range(8)]
    text = describe_violations({"object": "list", "data": cards}, "v1_models", limit=3)
    assert text is not None and "8 violations" in text and "(the first 3 shown)" in text
    assert text.count("  at $.data[") == 3


def test_the_first_violation_is_the_most_relevant_one() -> None:
    found = violations({"object": "list", "data": [{**CARD, "id": 5}]}, "v1_models")
    assert [v.json_path for v in found[:1]] == ["$.data[0].id"]
