import pytest

from beameval.core.errors import TemplateError
from beameval.core.templates import Template, metric_context, render_text


def render(source, item, sample=None):
    return Template(source, "t").render(metric_context(item, sample or {}))


def test_single_expression_keeps_native_types():
    item = {"a": 1, "b": [1, 2], "c": {"x": 1}}
    assert render("{{ item.a }}", item) == 1
    assert render("{{item.b}}", item) == [1, 2]
    assert render("  {{ item.c }} ", item) == {"x": 1}


def test_other_strings_render_text():
    assert render("Q: {{ item.a }}", {"a": 1}) == "Q: 1"
    assert render("{% if item.a %}yes{% endif %}", {"a": 1}) == "yes"


def test_tojson_decodes_back():
    assert render("{{ item.b | tojson }}", {"b": [1, {"k": "v"}]}) == [1, {"k": "v"}]
    assert render("{{ item.s | tojson }}", {"s": "plain"}) == "plain"
    assert render('{"q": {{ item.s | tojson }}}', {"s": "x"}) == {"q": "x"}


def test_dict_and_list_templates_render_recursively_and_constants_pass_through():
    source = {"messages": [{"role": "user", "content": "{{ item.q }}"}], "n": 3}
    assert render(source, {"q": "hi"}) == {"messages": [{"role": "user", "content": "hi"}], "n": 3}
    assert Template("constant", "t").is_constant


def _rendered_one_by_one(source, item):
    """The tree rendered container by container, each string through its own Template."""
    if isinstance(source, dict):
        return {key: _rendered_one_by_one(value, item) for key, value in source.items()}
    if isinstance(source, list):
        return [_rendered_one_by_one(value, item) for value in source]
    return render(source, item) if isinstance(source, str) else source


def test_a_tree_renders_as_its_parts_do_in_order_with_new_containers_each_time():
    deep = "{{ item.q }}"
    for level in range(250):  # deeper than Python's compiler takes in one display
        deep = {f"k{level}": deep, "n": [level, None]} if level % 2 else [deep, True]
    source = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "{{ item.id }}: {{ item.q }}"},
        ],
        "z": "{{ item.n }}",
        "a": [1.5, None, False, "{% if item.n %}yes{% endif %}", {"nested": ["{{ item.q | upper }}"]}, []],
        7: "int key",
        "deep": deep,
        "empty": {},
        "quote": 'say "ctx" \\ {{ item.q }} _0(ctx)',
    }
    item = {"id": 3, "q": "hi", "n": 2}
    first = render(source, item)
    assert first == _rendered_one_by_one(source, item)
    assert list(first) == list(source) and first["z"] == 2 and first["a"][3] == "yes"
    first["messages"][0]["content"] = "changed"
    first["a"][5].append("x")
    second = render(source, item)
    assert second == _rendered_one_by_one(source, item)  # nothing shared with the first result
    assert second["messages"][0]["content"] == "be brief" and second["a"][5] == []


def test_bare_names_and_sample_override_item():
    assert render("{{ question }}", {"question": "q1"}) == "q1"
    assert render("{{ output_text }}", {"output_text": "from item"}, {"output_text": "from sample"}) == "from sample"


def test_missing_field_names_the_field_and_available_keys():
    with pytest.raises(TemplateError) as info:
        Template("{{ item.answr }}", "reference").render(metric_context({"answer": 1, "id": 2}, {"output_text": "x"}))
    message = str(info.value)
    assert "'answr'" in message and "'reference'" in message
    assert "item keys: ['answer', 'id']" in message and "sample keys: ['output_text']" in message


def test_sandbox_blocks_python_internals():
    with pytest.raises(TemplateError, match="sandbox"):
        render("{{ item.__class__.__mro__ }}", {"a": 1})
    with pytest.raises(TemplateError, match="sandbox"):
        render("{{ ''.__class__.__mro__[1].__subclasses__() }}", {})


def test_template_syntax_in_data_is_data():
    payload = "{{ ''.__class__.__mro__ }}"
    assert render("Q: {{ item.q }}", {"q": payload}) == f"Q: {payload}"
    assert render("{{ item.q }}", {"q": payload}) == payload


def test_syntax_error_is_reported_at_compile_time():
    with pytest.raises(TemplateError, match="syntax error at line 1"):
        Template("{{ item.q ", "prompt_template")


def test_render_text_accepts_numbers_and_rejects_structures():
    ctx = metric_context({"n": 42, "f": 1.5, "l": [1]}, {})
    assert render_text(Template("{{ item.n }}", "reference"), ctx, "reference") == "42"
    assert render_text(Template("{{ item.f }}", "reference"), ctx, "reference") == "1.5"
    with pytest.raises(TemplateError, match="the reference must be text.*list"):
        render_text(Template("{{ item.l }}", "reference"), ctx, "reference")


def test_tojson_in_text_template_must_produce_json():
    with pytest.raises(TemplateError, match="must be JSON"):
        render("value: {{ item.s | tojson }}", {"s": "x"})


def test_dotted_lookups_take_the_fast_path_with_jinja_semantics():
    item = {"a": {"b": 1}, "keys": "value", "none": None}
    assert render("{{ item.a.b }}", item) == 1
    assert render("{{ a.b }}", item) == 1
    assert render("{{ item.none }}", item) is None
    assert callable(render("{{ item.keys }}", item))  # Jinja's getattr-first rule, kept
    with pytest.raises(TemplateError, match="'c'"):
        render("{{ item.a.c }}", item)
    with pytest.raises(TemplateError, match="'zz'"):
        render("{{ zz }}", item)
    with pytest.raises(TemplateError, match="sandbox"):
        render("{{ item.__class__ }}", item)


def test_text_of_lookups_renders_as_jinja_does():
    """Text with plain ``{{ a.b }}`` lookups is joined without Jinja: same text, same errors as through Jinja."""
    from beameval.core import templates

    sources = [
        "{{ item.id }}: {{ item.question }}",
        "Q: {{ question }}\nA:",
        "{{ a }}{{ b }} ü",
        "x {{ item.n.k }} y {{ missing }}",
        "{{ range }} {{ a }}",
        "{ {{ a }} }",
    ]
    values = ["s", "", 3, -7, 2.5, 1e300, True, None, [1, "2"], {"k": "v"}, "\ud800", 10**50]
    jinja_only = []  # the same sources compiled with the joining path turned off
    original = templates._text_of_lookups
    templates._text_of_lookups = lambda source: None
    try:
        jinja_only = [Template(source, "t") for source in sources]
    finally:
        templates._text_of_lookups = original
    assert all(original(source) is not None for source in sources)

    def outcome(template, item):
        try:
            return "ok", template.render(metric_context(item, {}))
        except TemplateError as exc:
            return "error", str(exc)

    compared = 0
    for source, reference in zip(sources, jinja_only, strict=True):
        joined = Template(source, "t")
        for first in values:
            for second in values:
                item = {"id": first, "question": second, "a": first, "b": second, "n": {"k": second}}
                assert outcome(joined, item) == outcome(reference, item), (source, item)
                compared += 1
    assert compared == len(sources) * len(values) ** 2
    # Sources Jinja would change or read otherwise keep Jinja's path.
    for source in ["{{- a }} b", "{% if a %}{{ a }}{% endif %}", "a\r\n{{ b }}", "a}} {{ b }}", "{{ a.keys }} {{ b }}"]:
        assert original(source) is None
