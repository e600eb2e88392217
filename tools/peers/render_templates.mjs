// Writes what @huggingface/jinja renders, for the chat template parity test:
//   node tools/peers/render_templates.mjs OUT_DIR
// OUT_DIR/templates.json holds {generator, templates: {key: source}, cases: [{name, template,
// context, expected | error}]}: each real chat template of the peer tokenizers on every
// conversation of tests/tokenizer/conversations.json (with and without a generation prompt), and
// small synthetic templates that exercise one feature each. An `error` case records that the
// peer raised; pagoda must raise too.
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";
import { Template } from "@huggingface/jinja";
import { TOKENIZERS, tokenizer_dir } from "./tokenize.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..", "..");

// Synthetic templates: [name, context, source]. Each stays within what the peer implements, or
// fails in a way pagoda must also fail.
const SYNTHETIC = [
  // Whitespace control and the lexer.
  ["ws_blocks", {}, "a\n  {% if true %}\n  x\n  {% endif %}\nb\n"],
  ["ws_dashes", {}, "a  {{- 1 -}}  b|  {%- if true -%}  c  {%- endif -%}  |\n{{- 'd' }}"],
  ["ws_comments", {}, "a {# c #}\nb {#- c -#}  d\n  {# own line #}\ne {#- x #} f"],
  [
    "ws_generation",
    {},
    "x\n  {% generation %}  y  {% endgeneration %}\nz|{%- generation -%}" +
    " q {%- endgeneration -%}|",
  ],
  ["ws_expression_keeps_indent", {}, "a\n  {{ 1 }}\n  b\n"],
  ["ws_single_trailing_newline", {}, "x\n\n"],
  ["ws_crlf", {}, "a\r\n  {% if true %}\r\n  x\r\n{% endif %}\r\n"],
  ["ws_unicode_spaces", {}, "a\u00a0\u3000{{- 'b' -}}\u2003c"],
  ["ws_tag_spans_lines", {}, "{{\n  'a'\n  ~ 'b'\n}}|{%\n  if true\n%}c{% endif %}"],
  // Literals and printing.
  [
    "literals",
    {},
    "{{ 'a\\n\\t\\'b' }}|{{ \"q\\\"\" }}|{{ 'x' 'y' }}|{{ 42 }}|{{ -3 }}|{{ 1.5 }}|{{ 1.0 }}|" +
    "{{ true }}|{{ True }}|{{ false }}|{{ none }}|{{ None }}|{{ [1, 'a', [2]] }}|" +
    "{{ (1, 2)|length }}|{{ {'k': 'v', 'n': [1, none]} }}",
  ],
  ["literal_escapes", {}, "{{ '\\u00e9\\x41\\u4e2d' }}|{{ \"\\\\\" }}"],
  [
    "numbers",
    {},
    "{{ 3 / 2 }}|{{ 4 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7.5 // 2 }}|{{ 7 % 3 }}|" +
    "{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 2.0 ** 2 }}|{{ 0.1 + 0.2 }}|{{ 0.0000001 }}|" +
    "{{ 10 * 2.5 }}|{{ 1 - 1.5 }}|{{ -0.0 }}|{{ 100000000000000000000.0 }}|{{ 123456789.125 }}",
  ],
  [
    "concatenation",
    {},
    "{{ 1.0 ~ '' }}|{{ 1.5 ~ 'x' }}|{{ [1.0, 2] ~ '' }}|{{ 'a' + 1 }}|{{ 2 + 'b' }}|" +
    "{{ true ~ '' }}|{{ 'a' ~ 'b' ~ 3 }}|{{ [1] + [2, 3] }}|{{ 'x' ~ [] }}",
  ],
  [
    "context_values",
    {
      "i": 3,
      "f": 2.5,
      "whole": 4,
      "b": false,
      "n": null,
      "s": "ü",
      "l": [
        1,
        "x",
        null,
        1.25
      ],
      "d": {
        "z": 1,
        "a": [
          true
        ]
      }
    },
    "{{ i }}|{{ f }}|{{ whole }}|{{ b }}|{{ n }}|{{ s }}|{{ l }}|{{ d }}",
  ],
  // Variables, members and slices.
  [
    "member_access",
    {"d": {"a": {"b": 1}, "list": [10, 20, 30]}},
    "{{ d.a.b }}|{{ d['a']['b'] }}|{{ d.list[0] }}|{{ d.list[-1] }}|{{ d.list.1 }}|" +
    "{{ d.missing }}|{{ d.missing.x }}|{{ d.list[10] }}|{{ d.list|length }}|" +
    "{{ d.list.length }}|{{ d['a'].b }}|{{ 'str'[1] }}|{{ 'str'.length }}",
  ],
  [
    "slices",
    {"messages": [{"role": "system"}, {"role": "user"}]},
    "{{ [1,2,3,4,5][1:3] }}|{{ [1,2,3][::-1] }}|{{ [1,2,3,4,5][::2] }}|{{ [1,2,3][-2:] }}|" +
    "{{ 'hello'[1:-1] }}|{{ 'héllo😀'[::-1] }}|{{ [1,2,3][:] }}|{{ [1,2,3,4,5][4:1:-1] }}|" +
    "{{ [1,2,3][5:] }}|{{ messages[1:] }}",
  ],
  [
    "undefined_values",
    {},
    "[{{ missing }}]|[{{ missing.attr }}]|[{{ missing['k'] }}]|{{ missing is defined }}|" +
    "{{ missing is undefined }}|{{ missing == none }}|{{ 'a' in missing }}",
  ],
  // Operators.
  [
    "comparisons",
    {},
    "{{ 1 < 2 }}{{ 2 <= 2 }}{{ 3 > 4 }}{{ 2.5 >= 2 }}{{ 1 == 1.0 }}{{ 'a' == 'a' }}" +
    "{{ 'a' != 'b' }}{{ none == none }}{{ 1 == true }}",
  ],
  [
    "membership",
    {},
    "{{ 'a' in 'cat' }}|{{ 'x' not in 'cat' }}|{{ 2 in [1,2] }}|{{ 3 in [1,2] }}|" +
    "{{ 'k' in {'k': 1} }}|{{ 'z' not in {'k': 1} }}|{{ 1 in missing }}|{{ 'b' in ['a', 'b'] }}",
  ],
  [
    "logic",
    {},
    "{{ true and 'x' }}|{{ false or 'y' }}|{{ [] or 'empty' }}|{{ {} and 1 }}|{{ not [] }}|" +
    "{{ not 'a' }}|{{ 0 or none }}|{{ '' or 0 }}|{{ 1 and 2 and 3 }}|{{ not not 1 }}",
  ],
  [
    "ternaries",
    {},
    "{{ 'a' if true else 'b' }}|{{ 'a' if false else 'b' }}|[{{ 'a' if false }}" +
    "]|{{ 1 if false else 2 if true else 3 }}|{{ ('x' if true else 'y') ~ '!' }}",
  ],
  [
    "precedence",
    {"x": 3, "messages": [1, 2]},
    "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}|{{ 10 - 2 - 3 }}|" +
    "{{ 'a' ~ 1 + 2 }}|{{ [1, 2]|length * 2 }}|{{ not 1 == 2 }}|{{ -x|abs }}|{{ 1 + x|abs }}|" +
    "{{ 3 is odd }}|{{ messages|length - 1 }}",
  ],
  // Tests.
  [
    "tests",
    {"s": "x", "n": 1, "f": 1.5, "l": [1], "d": {"a": 1}, "b": true, "z": null},
    "{{ s is string }}{{ n is number }}{{ f is number }}{{ n is integer }}{{ f is integer }}" +
    "{{ b is boolean }}{{ z is none }}{{ d is mapping }}{{ l is mapping }}{{ l is iterable }}" +
    "{{ s is iterable }}{{ d is iterable }}{{ l is sequence }}{{ d is sequence }}" +
    "{{ b is true }}{{ b is false }}{{ n is odd }}{{ n is even }}{{ 'abc' is lower }}" +
    "{{ 'ABC' is upper }}{{ 'aB' is lower }}{{ missing is defined }}{{ missing is undefined }}" +
    "{{ s is not none }}{{ range is callable }}{{ s is callable }}{{ z is not none }}",
  ],
  // Filters.
  [
    "filters_on_strings",
    {},
    "{{ '  pad  '|trim }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|" +
    "{{ 'hello world-foo bAR'|title }}|{{ 'hello World'|capitalize }}|" +
    "{{ 'aaa'|replace('a', 'b') }}|{{ 'aaa'|replace('a', 'b', 2) }}|" +
    "{{ 'abc'|replace('', '-') }}|{{ 'abc'|length }}|{{ 'abc'|string }}|{{ ' 42 '|int }}|" +
    "{{ '12abc'|int }}|{{ '3.5'|float }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|" +
    "{{ 'x'|float(default=1.5) }}|{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|" +
    "{{ 'a\\n\\nb'|indent(width=1, blank=true) }}|{{ 'abc'|join(',') }}|{{ 'abc'|safe }}",
  ],
  [
    "filters_on_lists",
    {},
    "{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort }}|" +
    "{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}|{{ [3,1,2]|sort(reverse=true) }}|" +
    "{{ [1,2,3]|first }}|{{ [1,2,3]|last }}|{{ [1,2,3]|length }}|{{ [1,2]|reverse }}|" +
    "{{ [1,2,1,3,'1']|unique }}|{{ [1,2]|list }}|{{ ['a','b']|join }}|" +
    "{{ ['a','b']|join(', ') }}|{{ [1, none, 'x', 1.0, true]|join('-') }}|" +
    "{{ [[1, 2], [3]]|join(';') }}",
  ],
  [
    "filters_on_dicts",
    {
      "users": [
        {
          "name": "b",
          "age": 3,
          "info": {
            "x": 1
          }
        },
        {
          "name": "a",
          "age": 1,
          "info": {
            "x": 2
          }
        },
        {
          "name": "c",
          "info": null
        }
      ]
    },
    "{{ users|map(attribute='name')|join(',') }}|" +
    "{{ users|map(attribute='age', default=0)|list }}|{{ users|map(attribute='info.x')|list }}|" +
    "{{ users|selectattr('age')|map(attribute='name')|list }}|" +
    "{{ users|rejectattr('age')|map(attribute='name')|list }}|" +
    "{{ users|selectattr('name', 'equalto', 'a')|list }}|" +
    "{{ users|selectattr('age', 'defined')|list|length }}|" +
    "{{ users|rejectattr('info', 'none')|list|length }}|" +
    "{{ users|sort(attribute='name')|map(attribute='name')|join }}|" +
    "{{ users[:2]|sort(attribute='age', reverse=true)|map(attribute='name')|join }}",
  ],
  [
    "dict_filters",
    {},
    "{{ {'b': 1, 'a': 2}|items|list }}|{{ {'b': 1, 'a': 2}|dictsort }}|" +
    "{{ {'b': 1, 'a': 2}|dictsort(by='value') }}|{{ {'b': 1, 'a': 2}|dictsort(reverse=true) }}|" +
    "{{ {'B': 1, 'a': 2}|dictsort(true) }}|{{ {'a': 1}|length }}",
  ],
  [
    "default_filter",
    {},
    "{{ missing|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|" +
    "{{ none|default('d') }}|{{ 0|default('d', boolean=true) }}|{{ 'v'|default('d') }}|" +
    "{{ missing|default(none) is none }}",
  ],
  [
    "number_filters",
    {},
    "{{ -3|abs }}|{{ -1.5|abs }}|{{ 3.7|int }}|{{ -3.7|int }}|{{ 3|float }}|{{ 5|string }}|" +
    "{{ 2.0|string }}|{{ true|int }}|{{ false|float }}|{{ true|string }}|{{ true|bool }}",
  ],
  [
    "tojson",
    {
      "data": {
        "name": "é",
        "list": [
          1,
          2.5,
          true,
          null,
          "q\"\\\n\t<>&'\u0001"
        ],
        "nested": {
          "empty_list": [],
          "empty_obj": {}
        }
      }
    },
    "{{ data|tojson }}\n{{ data|tojson(indent=2) }}\n{{ data|tojson(ensure_ascii=true) }}\n" +
    "{{ data|tojson(sort_keys=true) }}\n{{ data|tojson(separators=(',', ':')) }}\n" +
    "{{ 'x😀'|tojson(ensure_ascii=true) }}\n{{ missing|tojson }}\n{{ [1.0, 2.5, -0.0]|tojson }}" +
    "\n{{ [[], {}]|tojson(indent=4) }}",
  ],
  // Statements.
  [
    "for_loop_variables",
    {},
    "{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}" +
    "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|" +
    "{{ loop.nextitem }}];{% endfor %}",
  ],
  [
    "for_else_and_filter",
    {},
    "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1,2,3,4] if x is even %}{{ x }}" +
    "{{ loop.index }}{{ loop.length }}{% endfor %}|{% for x in [1] if false %}{% else %}" +
    "none{% endfor %}",
  ],
  [
    "for_unpacking",
    {},
    "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}" +
    "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}" +
    "{{ a + b }}{% endfor %}|{% for (a, b) in [[5, 6]] %}{{ a }}{{ b }}{% endfor %}",
  ],
  [
    "break_continue",
    {},
    "{% for x in range(10) %}{% if x == 5 %}{% break %}{% endif %}{% if x is odd %}" +
    "{% continue %}{% endif %}{{ x }}{% endfor %}|{% for a in [1, 2] %}{% for b in [1, 2, 3] %}" +
    "{% if b == 2 %}{% break %}{% endif %}{{ a }}{{ b }}{% endfor %}{% endfor %}",
  ],
  [
    "nested_loops",
    {},
    "{% for a in [1,2] %}{% for b in ['x','y'] %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}" +
    "{{ loop.index }};{% endfor %}",
  ],
  [
    "set_scoping",
    {},
    "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}|{% if true %}" +
    "{% set y = 3 %}{% endif %}{{ y }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (1, 2) %}" +
    "{{ t[1] }}{{ t|length }}|{% for i in [1, 2] %}{% if loop.first %}{% set z = 'kept' %}" +
    "{% endif %}{{ z }};{% endfor %}[{{ z }}]",
  ],
  [
    "namespace",
    {},
    "{% set ns = namespace(count=0, items=[]) %}{% for x in [1,2,3] %}" +
    "{% set ns.count = ns.count + x %}{% set ns.items = ns.items + [x] %}{% endfor %}" +
    "{{ ns.count }}|{{ ns.items }}|{{ ns }}|{% set ns2 = namespace({'a': 1}, b=2) %}{{ ns2.a }}" +
    "{{ ns2.b }}{{ ns2['a'] }}|{% set alias = ns %}{% set alias.count = 0 %}{{ ns.count }}",
  ],
  [
    "set_block",
    {},
    "{% set block %}  inner {{ 1 + 1 }}  {% endset %}[{{ block }}]|{% set b2 %}\n  text\n" +
    "{% endset %}[{{ b2 }}]",
  ],
  [
    "macros",
    {},
    "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}" +
    "{% endmacro %}{{ greet('Ann') }}|{{ greet('Bob', 'Hi') }}|{{ greet('Cy', punct='?') }}|" +
    "{{ greet(greeting='Yo', name='Di') }}|{% set text = greet('Ed') %}{{ text|upper }}",
  ],
  [
    "macro_special_arguments",
    {},
    "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}|" +
    "{% macro d(a, b=a*2) %}{{ a }}-{{ b }}{% endmacro %}{{ d(2) }}|{{ d(2, 5) }}",
  ],
  [
    "macro_sees_call_site",
    {},
    "{% macro show() %}{{ item }}{% endmacro %}{% for item in ['p', 'q'] %}{{ show() }}" +
    "{% endfor %}",
  ],
  [
    "call_blocks",
    {},
    "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}" +
    "{% call wrap('b') %}bold{% endcall %}|{% macro each(items) %}{% for i in items %}" +
    "{{ caller(i) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}[{{ item }}" +
    "]{% endcall %}",
  ],
  [
    "filter_blocks",
    {},
    "{% filter upper %}hello {{ 'world' }}{% endfilter %}|{% filter replace('a', 'o') %}" +
    "banana{% endfilter %}",
  ],
  [
    "if_chains",
    {},
    "{% for v in [1, 2, 3, 4] %}{% if v == 1 %}one{% elif v == 2 %}two{% elif v == 3 %}" +
    "three{% else %}other{% endif %},{% endfor %}|{% if not v %}no{% else %}yes{% endif %}",
  ],
  [
    "truthiness",
    {},
    "{% for v in [0, 1, '', 'a', [], [0], {}, {'a': 1}, none, 0.0, 0.5] %}" +
    "{{ 'T' if v else 'F' }}{% endfor %}",
  ],
  [
    "string_methods",
    {},
    "{{ '  a  '.strip() }}|{{ '  a  '.lstrip() }}|{{ '  a  '.rstrip() }}|" +
    "{{ '\\nx\\n'.strip('\\n') }}|{{ 'a,b,,c'.split(',') }}|{{ '  a  b '.split() }}|" +
    "{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.split(none, 1) }}|" +
    "{{ 'a</think>b'.split('</think>')[-1] }}|{{ 'abc'.startswith('ab') }}|" +
    "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'abc'.upper() }}|{{ 'ABC'.lower() }}|" +
    "{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }}|{{ 'aXa'.replace('a', 'b') }}|" +
    "{{ 'aaa'.replace('a', 'b', 1) }}",
  ],
  [
    "dict_methods",
    {"d": {"b": 2, "a": 1}},
    "{{ d.get('a') }}|[{{ d.get('z') }}]|{{ d.get('z', 'dflt') }}|{{ d.items() }}|" +
    "{{ d.keys() }}|{{ d.values() }}|{{ d.items()|list }}|{{ d.dictsort() }}",
  ],
  [
    "range",
    {},
    "{{ range(3) }}|{{ range(1, 4) }}|{{ range(10, 0, -3) }}|{% for i in range(2) %}{{ i }}" +
    "{% endfor %}",
  ],
  ["raise_exception", {}, "{% if true %}{{ raise_exception('custom failure') }}{% endif %}"],
  // Templates the peer rejects; pagoda must reject them too.
  ["error_unclosed_if", {}, "{% if true %}x"],
  ["error_unclosed_for", {}, "{% for x in [1] %}{% if x %}{% endif %}"],
  ["error_unknown_statement", {}, "{% include 'other.jinja' %}"],
  ["error_stray_end_tag", {}, "{% endfor %}"],
  ["error_unknown_filter", {}, "{{ 'a'|no_such_filter }}"],
  ["error_unknown_test", {}, "{{ 1 is no_such_test }}"],
  ["error_bad_escape", {}, "{{ '\\q' }}"],
  ["error_unterminated_string", {}, "{{ 'abc }}"],
  ["error_unterminated_comment", {}, "{# never closed"],
  ["error_unclosed_expression", {}, "{{ 1 + "],
  ["error_break_outside_loop", {}, "{% break %}"],
  ["error_undefined_arithmetic", {}, "{{ missing + 1 }}"],
  ["error_none_concatenation", {}, "{{ 'a' ~ none }}"],
  ["error_none_membership", {}, "{{ 'a' in none }}"],
  ["error_unpack_mismatch", {}, "{% for a, b in [[1]] %}{% endfor %}"],
  ["error_call_undefined", {}, "{{ nothing() }}"],
  ["error_set_attribute_on_dict", {}, "{% set d = {} %}{% set d.x = 1 %}"],
  ["error_iterate_number", {}, "{% for x in 5 %}{% endfor %}"],
  ["error_index_undefined", {}, "{{ missing[0] }}"],
  ["error_macro_extra_argument", {}, "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"],
  ["error_sort_mixed_types", {}, "{{ [1, 'a']|sort }}"],
];

function read_json(file) {
  return JSON.parse(fs.readFileSync(file, "utf8"));
}

function chat_template(config) {
  const template = config.chat_template;
  if (typeof template === "string") return template;
  if (Array.isArray(template)) {
    const named = template.find((t) => t.name === "default");
    if (named) return named.template;
  }
  throw new Error("tokenizer_config.json has no default chat_template");
}

// Special tokens are strings or AddedToken objects with a `content` field.
function token_text(token) {
  if (token === null || token === undefined) return null;
  return typeof token === "string" ? token : token.content;
}

function render(source, context) {
  let template;
  try {
    template = new Template(source);
  } catch (error) {
    return { error: `parse: ${error.message}` };
  }
  try {
    return { expected: template.render(context) };
  } catch (error) {
    return { error: error.message || String(error) };
  }
}

function main() {
  const out = process.argv[2];
  if (!out) throw new Error("usage: node render_templates.mjs OUT_DIR");
  const conversations = read_json(path.join(repo, "tests", "tokenizer", "conversations.json"));
  const jinja = read_json(path.join(here, "node_modules", "@huggingface", "jinja", "package.json"));
  const templates = {};
  const cases = [];
  for (const name of TOKENIZERS) {
    const config = read_json(path.join(tokenizer_dir(name), "tokenizer_config.json"));
    if (config.chat_template === undefined) continue;  // a base model's tokenizer has none
    templates[name] = chat_template(config);
    for (const conversation of conversations) {
      for (const add_generation_prompt of [true, false]) {
        const context = {
          messages: conversation.messages,
          add_generation_prompt,
          bos_token: token_text(config.bos_token),
          eos_token: token_text(config.eos_token),
          ...(conversation.tools ? { tools: conversation.tools } : {}),
          ...(conversation.context ?? {}),
        };
        const suffix = add_generation_prompt ? "generation_prompt" : "no_generation_prompt";
        cases.push({
          name: `${name}/${conversation.name}/${suffix}`,
          template: name,
          context,
          ...render(templates[name], context),
        });
      }
    }
  }
  for (const [name, context, source] of SYNTHETIC) {
    const key = `synthetic/${name}`;
    templates[key] = source;
    cases.push({ name: key, template: key, context, ...render(source, context) });
  }
  fs.mkdirSync(out, { recursive: true });
  const generator = `${jinja.name} ${jinja.version}`;
  const json = JSON.stringify({ generator, templates, cases }, null, 1);
  fs.writeFileSync(path.join(out, "templates.json"), json + "\n");
  const errors = cases.filter((c) => "error" in c).length;
  console.log(`chat templates: ${cases.length} cases (${errors} raise) with ${generator}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
