#!/usr/bin/env python3
"""The Jinja engine (src/jinja) against jinja2 as HF transformers sets it up for chat templates
(its own compiled environment: sandboxed, trim_blocks, lstrip_blocks, loop controls, tojson,
raise_exception, strftime_now, {% generation %}): every case must render to the same text and
the same generation spans (HF's character indices, compared as UTF-8 byte offsets), or fail in
both — with the same message where the template raises it.

    jinja_parity.py JINJA_RENDER_BINARY TEMPLATES_DIR
"""
import json
import pathlib
import subprocess
import sys
import tempfile

from transformers.utils.chat_template_utils import _compile_jinja_template

binary, templates = sys.argv[1], pathlib.Path(sys.argv[2])

# ---- Small cases: one feature each, with the semantics a port gets wrong.
CASES = [
    ("{{ 1 + 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 1.5 * 2 }} {{ 10 / 5 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 'x' + 'y' }}", {}),
    ("{{ none }} {{ True }} {{ 1.0 }} {{ 1e20 }} {{ 0.0001 }} {{ 0.00001 }} {{ 123456789.125 }} {{ [1, 'a', none, 2.5] }}", {}),
    ("{{ {'a': 1, 'b': [true, none]} }} {{ {'q': \"it's\"} }}", {}),
    ("{{ x }}|{{ x.y is defined }}|{{ d.missing }}|{{ d.missing is defined }}|{{ l[5] }}", {"d": {"a": 1}, "l": [1]}),
    ("{% if a and not b or c %}yes{% elif b %}b{% else %}no{% endif %}", {"a": 1, "b": 0, "c": ""}),
    ("{{ 'yes' if x else 'no' }} {{ 'yes' if y }}|", {"x": [], "y": 0}),
    ("{% for x in items %}{{ loop.index }}/{{ loop.length }}:{{ x }}{{ ',' if not loop.last }}{% endfor %}", {"items": ["a", "b", "c"]}),
    ("{% for x in items if x > 1 %}{{ loop.index0 }}{{ loop.first }}{{ loop.revindex }}{% else %}empty{% endfor %}", {"items": [1, 2, 3]}),
    ("{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("{% for x in range(5) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for x in [1,2] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('odd', 'even') }} {% endfor %}", {}),
    ("{% set n = 1 %}{% for x in [1, 2] %}{% set n = n + x %}{{ n }}{% endfor %}{{ n }}", {}),
    ("{% set ns = namespace(n=1, s='') %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t }}", {}),
    ("{% set block %}  inner {{ 1 }}  {% endset %}[{{ block }}]{% set up | upper %}abc{% endset %}{{ up }}", {}),
    ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', punct='?') }}", {}),
    ("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}body{% endcall %}", {}),
    ("{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, z=4) }}", {}),
    ("{% filter upper %}shout {{ 'it' }}{% endfilter %}", {}),
    ("{% raw %}{{ not rendered }}{% endraw %}", {}),
    ("  {% if true %}\n    kept\n  {% endif %}\nend", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c {{- ' d ' -}} e", {}),
    ("{# comment #}\nx{#- c -#}  y", {}),
    ("{%+ if true %}x{% endif %}", {}),
    ("{{ s | trim }}|{{ s | length }}|{{ s | upper }}|{{ s | lower }}|{{ 'hello world' | capitalize }}|{{ 'a b' | title }}", {"s": "  Héllo  "}),
    ("{{ 'a-b-c' | replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ ['a', 'b'] | join(', ') }} {{ [1, 2] | join }}", {}),
    ("{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}{{ 'xyz' | first }}{{ [] | first }}|{{ [3, 1, 2] | sort }}{{ [3, 1, 2] | sort(reverse=true) }}", {}),
    ("{{ x | default('d') }} {{ '' | default('d', true) }} {{ none | default('d') }} {{ x | d('e') }}", {}),
    ("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ msgs | rejectattr('role', 'eq', 'user') | list | length }}", {"msgs": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "u2"}]}),
    ("{{ msgs | selectattr('tool') | list }} {{ [1, 0, 2] | select | list }} {{ [1, 2, 3] | reject('odd') | list }} {{ ['a', 'B'] | map('upper') | list }}", {"msgs": [{"tool": 1}, {"x": 2}]}),
    ("{{ d | items | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('zz', 5) }} {{ d.get('zz') }}", {"d": {"a": 1, "b": 2}}),
    ("{{ v | tojson }} {{ v | tojson(indent=2) }} {{ 'é\"\\n<' | tojson }} {{ 1.0 | tojson }} {{ [] | tojson(indent=2) }}", {"v": {"b": [1, 2.5, None, True], "a": {"x": "y"}}}),
    ("{{ x | string }}{{ '42' | int }}{{ 'x' | int }}{{ '3.5' | float }}{{ -3 | abs }}{{ 2.567 | round(2) }}{{ [1,2,2] | unique | list }}{{ [1, 2] | sum }}", {"x": 5}),
    ("{{ 'line1\\nline2' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'one two' | wordcount }}|{{ 'abc' | reverse }}|{{ [1, 2] | reverse | list }}", {}),
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'x,y'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ s.strip(' H') }}", {"s": " Hi "}),
    ("{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'abcb'.find('b') }}{{ 'abcb'.count('b') }}{{ '-'.join(['a', 'b']) }}", {}),
    ("{{ 'hello'[1:3] }}{{ 'hello'[-2:] }}{{ 'hello'[::-1] }}{{ [1, 2, 3, 4][1::2] }}{{ [1, 2, 3][-1] }}{{ 'héllo'[1] }}{{ 'héllo' | length }}", {}),
    ("{{ x is none }}{{ x is not none }}{{ 1 is number }}{{ true is number }}{{ 's' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 's' is sequence }}{{ true is true }}{{ 0 is false }}", {"x": None}),
    ("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is in [1, 2] }}{{ 'a' is lower }}{{ x is sameas none }}{{ 1 is eq 1 }}{{ 1 is integer }}{{ 1.5 is float }}", {"x": None}),
    ("{{ 'b' in 'abc' }}{{ 'z' not in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}{{ none == none }}", {}),
    ("{{ not x is defined }}{{ -x | abs if x is defined else 0 }}{{ (1, 2) == [1, 2] }}", {}),
    ("{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(5, 0, -2) | list }}", {}),
    ("{{ dict(a=1, b=2) }}{{ namespace(x=1).x }}", {}),
    ("{{ messages[0]['content'] }}{{ messages[0].content }}{{ messages[-1].role }}", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
    ("{% set d = {0: 'a', 1.0: 'b', true: 'c', 'k': 1, none: 2} %}{{ d }} {{ d[1] }}{{ d[0.0] }}{{ d.get(1) }} {{ d | tojson }} {{ 0 in d }}{{ 2 in d }}", {}),
    ("{% set d = {16: 'x', 2: 'y', -1: 'z'} %}{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}{{ d | tojson(sort_keys=true) }}{{ dict(d, a=1) }}", {}),
    ("{{ {[1]: 2} }}", {}),
    ("{{ {'a': 1, 2: 3} | dictsort }}", {}),
    ("{{ 3.0 is divisibleby 1.5 }}{{ 6 is divisibleby true }}{{ -7 is divisibleby 7 }}{{ x is divisibleby(3) is true }}", {"x": 3}),
    ("{{ 'x' is divisibleby 3 }}", {}),
    ("{{ 3 is divisibleby 0 }}", {}),
    ("{{ x is not none not in [1] }}", {"x": 3}),
    ("{{ x is defined is defined }}", {}),
    ("{{ x is sameas in }}", {"x": 3}),
    ("{{ 1 is odd(3) }}", {}),
    ("{% set café = 'x' %}{{ café }}{{ 必 }}|{% for ü in [1] %}{{ ü }}{% endfor %}{{ _a1 }}", {}),
    ("{{ 1必 }}", {}),
    ("{{ x[] }}{{ d[] }}|{{ 'citations' in controls }}{{ controls | length }}", {"x": {}, "d": {"a": 1}}),
    ("{% if x if y %}a{% endif %}", {"x": 1}),
    ("{{ ✓ }}", {}),
    ("{{ v | tojson(ensure_ascii=true) }} {{ v | tojson(separators=(',', ':')) }} {{ v | tojson(indent='\t') }} {{ v | tojson(true, 1) }}", {"v": {"é": ["😀", "\u2028", 1.5e300]}}),
    ("{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ -0.5 | round }} {{ 1234.5 | round(-2) }} {{ 7 | round(1) }} {{ 2.5 | round(method='floor') }} {{ 2.5 | round(none) }}", {}),
    ("{{ '3.5' | int }} {{ ' 42 ' | int }} {{ '0x1A' | int(0, 16) }} {{ '0o17' | int(base=0) }} {{ '-0b101' | int(base=0) }} {{ '0x1f' | int(base=2) }} {{ '010' | int(base=0) }} {{ ' -7 ' | int }} {{ 'x' | int('d') }} {{ '1_000' | float }} {{ 'inf' | float }} {{ '-nan' | float }} {{ 'abc' | float(none) }}", {}),
    ("{{ \"it's a re-do (x) o'neil [y] <z>\" | title }}|{{ \"it's a re-do\".title() }}|{{ 'ǆ émile' | title }}", {}),
    ("{{ 'a\\r\\nb\\u2028c\\x1cd\\n'.splitlines() }}{{ 'a\\r\\nb\\n'.splitlines(true) }}|{{ '\\u3000 x \\xa0'.strip() }}|{{ 'éaé'.strip('é') }}|{{ 'a b\\u3000c'.split() }}", {}),
    ("{{ 'a,b,c'.rsplit(',', 1) }}{{ 'a  b c'.rsplit(none, 1) }}{{ 'Ⅻ²٣'.isdigit() }}{{ 'é'.isalpha() }}{{ '\\u3000'.isspace() }}{{ 'x1²'.isalnum() }}", {}),
    ("{{ s | indent(2) }}|{{ s | indent(2, true, true) }}|{{ s | indent('> ') }}", {"s": "a\n\n  \nb\n"}),
    ("{{ d | dictsort(by='value') }}{{ d | dictsort(reverse=true) }}{{ [3, 1, 2] | sort(reverse=true) }}{{ ['b', 'A', 'a'] | sort(reverse=true) }}", {"d": {"b": 1, "a": 2}}),
    ("{{ 'Hello wörld_x 42' | wordcount }} {{ -7 % 3 }} {{ -7.5 % 2 }} {{ 7.5 % -2 }} {{ 2 ** 62 }} {{ 3 * 'ab' }} {{ [0] * 2 }}", {}),
    ("{{ 'a' * 10 ** 12 }}", {}),
    ("{{ [1, 2, 1].count(1) }}{{ [1, 2].index(2) }}{{ 'abcb'.count('') }}{{ 'ab'.find('') }}{{ 'ab'.rfind('') }}", {}),
    ("{{ raise_exception('no system role here') }}", {}),
    ("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok", {"messages": [{"role": "system"}]}),
    ("{% generation %}all{% endgeneration %}x{% generation %}é{{ 1 }}{% endgeneration %}", {}),
    ("{{ 'Ünïcödé ✓' }} {{ '\\u00e9\\x41' }} {{ '\\t' | tojson }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ x.y }}", {}),
    ("{{ [1, 2].append(3) }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{% for x in 5 %}{% endfor %}", {}),
    ("{% if %}{% endif %}", {}),
    ("{% for x in y %}", {}),
    ("{{ 1 + }}", {}),
    ("{% endif %}", {}),
    ("{{ x | nosuchfilter }}", {}),
    ("{{ 'a' ", {}),
    ("{% set x %}unclosed", {}),
    ("{{ 1 is nosuchtest }}", {}),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", {}),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {}, 1_000_000),
]


def jinja2_render(template, variables):
    try:
        compiled = _compile_jinja_template(template)
        blocks, generation = [], []
        with compiled.environment.activate_tracker(blocks, generation):
            for block in compiled.generate(**variables):
                blocks.append(block)
        text = "".join(blocks)
        # Character indices -> UTF-8 byte offsets.
        to_bytes = lambda i: len(text[:i].encode())
        return {"text": text, "generation": [[to_bytes(a), to_bytes(b)] for a, b in generation]}
    except Exception as e:  # noqa: BLE001 - any failure of jinja2's is one ours must share
        raised = type(e).__name__ == "TemplateError" and "raise_exception" not in str(e) and e.__class__.__module__ == "jinja2.exceptions"
        return {"error": f"{type(e).__name__}: {e}", "message": str(e)}


def conversations():
    """The seven template shapes, each over conversations that exercise it."""
    # JSON-schema shapes that tool-rendering templates walk (GPT-OSS turns them into TypeScript).
    tools = [{"type": "function", "function": {"name": "get_time", "description": "The time in a zone.", "parameters": {
        "type": "object", "required": ["tz"], "properties": {
            "tz": {"type": "string", "description": "IANA zone", "enum": ["UTC", "CET"], "default": "UTC"},
            "hours": {"type": "array", "items": {"type": "integer"}}, "fmt": {"type": ["string", "null"]},
            "when": {"oneOf": [{"type": "string"}, {"type": "number", "description": "epoch"}], "default": "now"},
            "opts": {"type": "object", "properties": {"utc": {"type": "boolean"}}, "nullable": True}}}}},
             {"type": "function", "function": {"name": "noop", "description": "Nothing.", "parameters": {"type": "object"}}}]
    plain = [{"role": "user", "content": " What is 2+2? "}, {"role": "assistant", "content": "4 "},
             {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "6, naïvely ✓"}]
    system = [{"role": "system", "content": "Be brief."}] + plain
    reasoning = [{"role": "user", "content": "Think."},
                 {"role": "assistant", "content": "Done.", "reasoning_content": "\nhmm\n", "thinking": "hmm"}]
    calls = [{"role": "user", "content": "time?"},
             {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_time", "arguments": {"tz": "UTC"}}}]},
             {"role": "tool", "content": "12:00"}, {"role": "assistant", "content": "It is noon."}]
    out_of_order = [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]
    base = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "25 Nov 2026", "tools": None}
    for name in sorted(p.stem for p in templates.glob("*.jinja")):
        text = (templates / f"{name}.jinja").read_text()
        for label, messages in [("plain", plain), ("system", system), ("reasoning", reasoning), ("tool calls", calls),
                                ("out of order", out_of_order)]:
            for prompt in (False, True):
                variables = dict(base, messages=messages, add_generation_prompt=prompt)
                yield f"{name}, {label}{', generation prompt' if prompt else ''}", text, variables
        yield f"{name}, tools", text, dict(base, messages=plain, add_generation_prompt=False, tools=tools)
        yield f"{name}, no date_string", text, {k: v for k, v in dict(base, messages=plain).items() if k != "date_string"}


def mutants(count_per_template=60):
    """Malformed templates (the fuzz family of chat templates): each template with a span cut
    out, a span repeated, or a tag's delimiter broken, from a fixed seed."""
    import random
    rng = random.Random(34)
    base = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "1 Jan 2026", "tools": None,
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
            "add_generation_prompt": True}
    for path in sorted(templates.glob("*.jinja")):
        text = path.read_text()
        for k in range(count_per_template):
            a = rng.randrange(len(text))
            b = min(len(text), a + rng.randrange(1, 40))
            kind = k % 3
            if kind == 0:
                mutant = text[:a] + text[b:]
            elif kind == 1:
                mutant = text[:b] + text[a:b] + text[b:]
            else:
                mutant = text[:a] + rng.choice(["{%", "%}", "{{", "}}", "{#", "'", "(", "]", "|", " is ", " not "]) + text[a:]
            yield f"{path.stem} mutant {k}", mutant, base


def type_matrix():
    """Every filter, test, string method and operator over values of every type, with and without an
    argument of every type: what a template does to a field of an unexpected type. Each must
    render as jinja2 renders it or fail where jinja2 fails; none may crash."""
    values = ["none", "true", "3", "-2.5", "'Ab c'", "''", "[1, 'a']", "[]", "{'k': 1}", "nothing"]
    filters = ["abs", "capitalize", "count", "default", "dictsort", "first", "float", "indent", "int", "items", "join",
               "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse",
               "round", "safe", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim", "unique",
               "upper", "wordcount", "e"]
    tests = ["boolean", "callable", "defined", "divisibleby", "eq", "even", "false", "float", "ge", "gt", "in",
             "integer", "iterable", "le", "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas",
             "sequence", "string", "true", "undefined", "upper"]
    methods = ["strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "find", "rfind", "count",
               "replace", "upper", "lower", "title", "capitalize", "isdigit", "isalpha", "splitlines", "get", "keys",
               "values", "items", "join"]
    operators = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "<", "in", "and"]
    lazy = {"map", "reject", "rejectattr", "select", "selectattr", "unique", "reverse", "items"}  # jinja2 returns generators
    for x in values:
        for f in filters:
            tail = " | list" if f in lazy else ""  # printed as they are, a generator shows its address
            yield f"{x} | {f}", f"{{{{ {x} | {f}{tail} }}}}", {}
            for y in values:
                yield f"{x} | {f}({y})", f"{{{{ {x} | {f}({y}){tail} }}}}", {}
        for t in tests:
            yield f"{x} is {t}", f"{{{{ {x} is {t} }}}}", {}
            for y in values[:5] + values[6:]:
                yield f"{x} is {t} {y}", f"{{{{ {x} is {t}({y}) }}}}", {}
        for m in methods:
            tail = " | list" if m in ("keys", "values", "items") else ""  # dict views print as dict_keys([...])
            yield f"{x}.{m}()", f"{{{{ {x}.{m}(){tail} }}}}", {}
            for y in values[2:7]:
                yield f"{x}.{m}({y})", f"{{{{ {x}.{m}({y}){tail} }}}}", {}
        for op in operators:
            for y in values:
                if op == "**" and x.startswith("-") and "." in y:
                    continue  # a complex number in Python; refused by ours (no template needs one)
                yield f"{x} {op} {y}", f"{{{{ {x} {op} {y} }}}}", {}
        yield f"{x}[0]", f"{{{{ {x}[0] }}}}|{{{{ {x}[1:] }}}}", {}
        yield f"for in {x}", f"{{% for i in {x} %}}{{{{ i }}}},{{% endfor %}}", {}


def main():
    cases = [(f"case {i}: {c[0]!r}", c[0], c[1], c[2] if len(c) > 2 else None) for i, c in enumerate(CASES)]
    cases += [(label, text, variables, None) for label, text, variables in type_matrix()]
    cases += [(label, text, variables, None) for label, text, variables in conversations()]
    cases += [(label, text, variables, None) for label, text, variables in mutants()]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([dict({"template": t, "variables": v}, **({"max_steps": s} if s else {})) for _, t, v, s in cases], f)
    ours = json.loads(subprocess.run([binary, f.name], capture_output=True, text=True, check=True).stdout)
    problems, rendered, refused = [], 0, 0
    for (label, template, variables, steps), mine in zip(cases, ours):
        if steps:  # a hostile template: jinja2 would run for hours; ours must stop with a message
            if "error" not in mine or "steps" not in mine["error"]:
                problems.append(f"{label}: expected the step limit, got {mine}")
            refused += 1
            continue
        if mine.get("escaped") or "internal error of the template engine" in mine.get("error", ""):
            problems.append(f"{label}: {mine['error']}")
            continue
        reference = jinja2_render(template, variables)
        if "error" in reference:
            refused += 1
            if "error" not in mine:
                problems.append(f"{label}: jinja2 fails ({reference['error']}), ours renders {mine['text']!r}")
            elif type(reference) and "TemplateError" in reference["error"] and mine.get("raised") and \
                    reference["message"] not in mine["error"]:
                problems.append(f"{label}: raise_exception message {reference['message']!r} not in {mine['error']!r}")
            continue
        rendered += 1
        if "error" in mine:
            problems.append(f"{label}: jinja2 renders {reference['text']!r}, ours fails: {mine['error']}")
        elif mine["text"] != reference["text"]:
            problems.append(f"{label}:\n  jinja2 {reference['text']!r}\n  ours   {mine['text']!r}")
        elif mine["generation"] != reference["generation"]:
            problems.append(f"{label}: generation spans {mine['generation']} vs jinja2's {reference['generation']}")
    for p in problems:
        print("MISMATCH", p)
    print(f"{rendered} cases rendered the same as jinja2, {refused} refused by both; {len(problems)} mismatches")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
