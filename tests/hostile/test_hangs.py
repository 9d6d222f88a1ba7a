"""Nothing hangs the run: a day-long Retry-After, templates that loop or grow without end, a YAML alias bomb."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from beameval.core.errors import TemplateError
from beameval.core.sandbox import MAX_RENDER_CHARS, MAX_RENDER_STEPS
from beameval.core.templates import Template
from beameval.inference.backoff import MAX_RETRY_WAIT_S, retry_wait, wait_too_long
from beameval.inference.classify import Failure, parse_retry_after
from pipeline.config import MAX_CONFIG_NODES

PROMPT = {"messages": [{"role": "user", "content": "{{ item.question }}"}]}
EXACT = [{"type": "exact-match", "reference": "{{ item.answer }}"}]


class _Rng:
    def random(self) -> float:
        return 0.5


def test_waits_are_capped_and_a_longer_retry_after_is_refused():
    day = Failure("hard_overload", True, 86400.0, 503, "HTTP 503")
    assert MAX_RETRY_WAIT_S == 120.0
    assert retry_wait(day, 1, _Rng()) == 120.0
    assert wait_too_long(day) and not wait_too_long(Failure("hard_overload", True, 120.0, 503, "x"))
    assert retry_wait(Failure("hard_overload", True, 2.0, 503, "x"), 1, _Rng()) == 2.0
    assert retry_wait(Failure("hard_overload", True, 2.0, 503, "x"), 1, _Rng(), max_wait=1.0) == 1.0
    year_2100 = parse_retry_after("Fri, 01 Jan 2100 00:00:00 GMT", now=time.time())
    assert year_2100 is not None and wait_too_long(Failure("hard_overload", True, year_2100, 503, "x"))


@pytest.mark.slow
@pytest.mark.parametrize("retry_after", ["86400", "Fri, 01 Jan 2100 00:00:00 GMT"])
def test_a_day_long_retry_after_fails_the_row_at_once_quoting_it(
    write_jsonl, hostile, hostile_target, run_eval, retry_after
):
    hostile.script["SLOW"] = hostile.reply_with('"busy"', status=503, **{"Retry-After": retry_after})
    data = write_jsonl([{"question": "fine", "answer": "fine"}, {"question": "SLOW down", "answer": "x"}])
    config = {
        "dataset": {"path": str(data)},
        "target": hostile_target(),
        "prompt_template": PROMPT,
        "params": {"ignore_request_failure": True, "max_retries": 5},
        "metrics": EXACT,
    }
    started = time.monotonic()
    result = run_eval(config)
    assert time.monotonic() - started < 60  # a capped wait would be 120 s; refusing it takes none
    assert result.code == 0, result.stderr
    assert [r["status"] for r in result.rows] == ["ok", "error"]
    assert hostile.seen["SLOW down"] == 1  # not retried at all
    (error,) = result.errors
    assert "asked to wait" in error["error"] and "longer than params.max_retry_wait (120 s)" in error["error"]
    if retry_after == "86400":
        assert "wait 86400 s before retrying (Retry-After)" in error["error"]
    assert error["http_status"] == 503 and error["attempts"] == 1


def test_max_retry_wait_is_a_param_with_the_default_cap(tmp_path: Path):
    from beameval.config.params import Params

    assert Params().max_retry_wait == 120.0
    assert Params(max_retry_wait=5).max_retry_wait == 5.0


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", "steps"),
        ("{% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}{{ f(40) }}", "steps"),
        ("{{ lipsum(n=10**8) }}", "lipsum(), which is not available"),
        ("{{ 'x'|center(10**9) }}", "filter 'center' with argument 1000000000"),
        ("{{ 'x' * 10**9 }}", "a repetition with '*'"),
        ("{{ 'x'.ljust(10**9) }}", "calling ljust"),
        ("{{ '%1000000000d' % 1 }}", "field width of 1,000,000,000"),
        ("{{ '{:>{}}'.format(1, 10**9) }}", "str.format with argument"),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "namespace",
        ),
        ("{{ 2 ** 1000000000 }}", "too large"),
    ],
)
@pytest.mark.timeout(60)  # a template that really loops would never return: the test fails at the timeout
def test_templates_that_loop_or_grow_without_end_fail_fast_with_a_clear_message(source, expected):
    with pytest.raises(TemplateError) as caught:
        Template(source, "prompt_template").render({"item": {}})
    assert expected in str(caught.value)
    assert str(caught.value).startswith("template 'prompt_template' ")
    # In a message, next to text and lookups that need no budget, the same template is stopped the same way.
    tree = {"messages": [{"role": "system", "content": "{{ item.id }}: hi"}, {"role": "user", "content": source}]}
    with pytest.raises(TemplateError) as in_tree:
        Template(tree, "prompt_template").render({"item": {"id": 1}})
    assert expected in str(in_tree.value)


def test_ordinary_templates_are_untouched_by_the_budget():
    item = {"id": 1700000000, "shots": [{"q": f"q{i}", "a": f"a{i}"} for i in range(2000)]}
    source = "{% for s in item.shots %}Q: {{ s.q }} A: {{ s.a }}\n{% endfor %}{{ '%d' % item.id }} {{ range(3)|list }}"
    text = Template(source, "prompt_template").render({"item": item})
    assert text.count("Q: ") == 2000 and text.endswith("1700000000 [0, 1, 2]")
    assert MAX_RENDER_STEPS == 1_000_000 and MAX_RENDER_CHARS == 64 * 1024 * 1024


@pytest.mark.slow
def test_a_row_over_the_budget_fails_alone_and_the_preflight_fails_the_config(
    write_jsonl, clean_server, model_target, run_eval
):
    loops = "{% for i in range(item.n) %}{% for j in range(item.n) %}{% endfor %}{% endfor %}{{ item.question }}"
    prompt = {"messages": [{"role": "user", "content": loops}]}
    data = write_jsonl([{"question": "a", "answer": "a", "n": 2}, {"question": "b", "answer": "b", "n": 100000}])
    config = {
        "dataset": {"path": str(data)},
        "target": model_target(),
        "prompt_template": prompt,
        "params": {"ignore_request_failure": True},
        "metrics": EXACT,
    }
    result = run_eval(config)
    assert result.code == 0, result.stderr
    assert [r["status"] for r in result.rows] == ["ok", "error"]
    assert "exceeded its rendering budget" in result.errors[0]["error"]
    assert result.errors[0]["phase"] == "sample_generation"
    # A template over budget on the first row: the (strict) preflight stops the run before it starts.
    data = write_jsonl([{"question": "b", "answer": "b", "n": 100000}], name="first.jsonl")
    result = run_eval({**config, "dataset": {"path": str(data)}, "params": {}})
    assert result.code == 2 and "preflight: the first row" in result.stderr
    assert "exceeded its rendering budget" in result.stderr
    # ... and in lenient mode too: a template over budget fails every row, so the config is wrong.
    lenient = run_eval({**config, "dataset": {"path": str(data)}})
    assert lenient.code == 2 and "exceeded its rendering budget" in lenient.stderr


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + f"\nmetrics: [{{type: exact-match, reference: x, candidate: x, extra: *a{levels - 1}}}]\n"


@pytest.mark.timeout(60)  # expanding the aliases would take hours and 10**9 strings
def test_a_yaml_alias_bomb_is_refused_quickly(tmp_path: Path, run_eval, capsys):
    from pipeline.run import main

    path = tmp_path / "bomb.yaml"
    text = _bomb()
    assert len(text) < 2048  # about 1 KB that would expand to 10**9 strings
    path.write_text("dataset: {path: x.jsonl}\n" + text)
    code = main(["--config", str(path), "--output", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert f"expands to more than {MAX_CONFIG_NODES:,} values through its YAML aliases" in err


def test_ordinary_aliases_and_recursive_ones(tmp_path: Path, capsys):
    from pipeline.config import _load_yaml

    assert _load_yaml("a: &x [1, 2]\nb: *x\n", "c.yaml") == {"a": [1, 2], "b": [1, 2]}
    with pytest.raises(Exception, match="contains itself"):
        _load_yaml("a: &x [1, *x]\n", "c.yaml")
    assert yaml.safe_load("a: 1") == {"a": 1}


def test_a_deeply_nested_config_is_a_config_error(tmp_path: Path, capsys):
    from pipeline.run import main

    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 10_000 + "]" * 10_000 + "\n")
    assert main(["--config", str(path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "nested too deeply" in err or "exceeded maximum nesting depth" in err
