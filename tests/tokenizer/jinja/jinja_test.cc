// The Jinja interpreter feature by feature. Expected strings follow Jinja's documented semantics,
// or the reference renderer (@huggingface/jinja) where chat templates are rendered its way; those
// cases say so. chat_template_test.cc checks the same features against the reference directly.
#include "tokenizer/jinja/jinja.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

std::string render(std::string_view source, const Json& context = Json::object()) {
  return JinjaTemplate::parse(source).render(context);
}

// The message of the Error that parsing or rendering raises; empty when it renders.
std::string error_of(std::string_view source, const Json& context = Json::object()) {
  try {
    render(source, context);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool holds(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(JinjaTest, RendersTextAndExpressions) {
  EXPECT_EQ(render("Hello {{ name }}!", {{"name", "World"}}), "Hello World!");
  EXPECT_EQ(render(""), "");
  EXPECT_EQ(render("no tags { here } %}"), "no tags { here } %}");
  EXPECT_EQ(render("a{# a comment #}b"), "ab");
}

TEST(JinjaTest, TrimsBlocksAndStripsTheirIndentation) {
  // trim_blocks drops the newline after a tag, lstrip_blocks the indentation before it, and the
  // template's single trailing newline is dropped.
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\n"), "yes\n");
  EXPECT_EQ(render("<ul>\n  {% for x in [1, 2] %}\n  <li>{{ x }}</li>\n  {% endfor %}\n</ul>"),
            "<ul>\n  <li>1</li>\n  <li>2</li>\n</ul>");
  // Expressions keep their indentation.
  EXPECT_EQ(render("a\n  {{ 'b' }}\n"), "a\n  b");
  EXPECT_EQ(render("x\n\n"), "x\n");
}

TEST(JinjaTest, DashesStripWhitespaceAroundTags) {
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a \n {%- if true -%} \n b \n {%- endif -%} \n c"), "abc");
  EXPECT_EQ(render("a \n {#- note -#} \n b"), "ab");
}

TEST(JinjaTest, GenerationTagsRenderTheirBody) {
  EXPECT_EQ(render("{% generation %}reply{% endgeneration %}"), "reply");
  EXPECT_EQ(render("a {%- generation -%} b {%- endgeneration -%} c"), "abc");
}

TEST(JinjaTest, PrintsValuesLikeTheReferenceRenderer) {
  EXPECT_EQ(render("[{{ none }}][{{ missing }}]"), "[][]");
  EXPECT_EQ(render("{{ true }} {{ False }}"), "true false");
  EXPECT_EQ(render("{{ 1.0 }} {{ 3 / 2 }} {{ 4 / 2 }} {{ 0.1 + 0.2 }}"),
            "1.0 1.5 2.0 0.30000000000000004");
  EXPECT_EQ(render("{{ [1, 'a', none, 2.5] }}"), "[1, \"a\", null, 2.5]");
  EXPECT_EQ(render("{{ {'k': 'v', 'n': {}} }}"), "{\"k\": \"v\", \"n\": {}}");
  // Context numbers that are whole are integers, as JSON numbers are in JavaScript.
  EXPECT_EQ(render("{{ x }} {{ y }}", {{"x", 2.0}, {"y", 2.5}}), "2 2.5");
}

TEST(JinjaTest, StringLiteralsResolveEscapes) {
  EXPECT_EQ(render(R"({{ 'a\n\t\'b' }})"), "a\n\t'b");
  EXPECT_EQ(render(R"({{ "q\"\\" }})"), "q\"\\");
  EXPECT_EQ(render(R"({{ '\u00e9\x41' }})"), "\u00e9A");
  EXPECT_EQ(render("{{ 'a' 'b' }}"), "ab");
}

TEST(JinjaTest, Arithmetic) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 10 - 2 - 3 }}"), "7 9 5");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7.5 // 2 }} {{ 7 % 3 }}"), "3 -4 3.0 1");
  EXPECT_EQ(render("{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }}"), "1024 0.5 64");
  // `~` and `+` stringify floats as JavaScript does (2.0 -> "2"), like the reference renderer.
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ 2.0 }} {{ 'ab' + 'cd' }} {{ [1] + [2] }}"), "a12 abcd [1, 2]");
  EXPECT_EQ(render("{{ 'ab' * 2 }}"), "abab");
  EXPECT_NE(error_of("{{ 1 / 0 }}"), "");
}

TEST(JinjaTest, ComparisonsMembershipAndLogic) {
  EXPECT_EQ(render("{{ 1 < 2 }} {{ 2 >= 3 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'a' < 'b' }}"),
            "true false true true true");
  EXPECT_EQ(render("{{ 'a' in 'cat' }} {{ 3 not in [1, 2] }} {{ 'k' in {'k': 1} }}"),
            "true true true");
  EXPECT_EQ(render("{{ [] or 'empty' }} {{ 'x' and 'y' }} {{ not 0 }} {{ 0 or none }}|"),
            "empty y true |");
  EXPECT_EQ(render("{{ 'a' if x else 'b' }}{{ 'c' if not x }}"), "bc");
  EXPECT_EQ(render("{{ 1 if false else 2 if false else 3 }}"), "3");
}

TEST(JinjaTest, MemberAccessAndSlices) {
  const Json context = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                        {"d", {{"a", {{"b", 7}}}}}};
  EXPECT_EQ(render("{{ messages[0].role }} {{ messages[0]['content'] }} {{ d.a.b }}", context),
            "user hi 7");
  // Missing members are undefined, and so are their members.
  EXPECT_EQ(render("[{{ messages[0]['missing'] }}][{{ d.x.y }}][{{ messages[5] }}]", context),
            "[][][]");
  EXPECT_EQ(render("{{ messages[0]['missing'] is defined }}", context), "false");
  EXPECT_EQ(render("{{ [1, 2, 3][-1] }} {{ [1, 2, 3].1 }} {{ 'hello'[1] }}"), "3 2 e");
  EXPECT_EQ(render("{{ [1, 2, 3, 4][1:3] }} {{ [1, 2, 3][::-1] }} {{ 'hello'[1:-1] }}"),
            "[2, 3] [3, 2, 1] ell");
  EXPECT_EQ(render("{{ [1, 2, 3, 4, 5][::2] }} {{ [1, 2, 3, 4, 5][4:1:-1] }}"),
            "[1, 3, 5] [5, 4, 3]");
  // Strings index and count by code point.
  EXPECT_EQ(render("{{ 'h\u00e9llo'[1] }} {{ 'h\u00e9llo'|length }} {{ 'ab\U0001F600'[::-1] }}"),
            "\u00e9 5 \U0001F600ba");
  EXPECT_EQ(render("[{{ 'h\u00e9llo w\u00f6rld'[1:8] }}][{{ 'h\u00e9llo'[-4:] }}]"
                   "[{{ 'h\u00e9llo'[4:1] }}][{{ 'h\u00e9llo w\u00f6rld'[1::3] }}]"
                   "[{{ 'h\u00e9llo'[-1] }}][{{ 'h\u00e9llo'[9] }}][{{ 'hello'[-9:2] }}]"),
            "[\u00e9llo w\u00f6][\u00e9llo][][\u00e9o\u00f6d][o][][he]");
}

TEST(JinjaTest, Tests) {
  const Json context = {{"s", "x"},        {"n", 3},      {"f", 1.5}, {"l", Json::array({1})},
                        {"d", {{"a", 1}}}, {"z", nullptr}};
  EXPECT_EQ(render("{{ s is string }}{{ n is number }}{{ n is integer }}{{ f is float }}"
                   "{{ z is none }}{{ d is mapping }}{{ l is iterable }}{{ l is sequence }}",
                   context),
            "truetruetruetruetruetruetruetrue");
  EXPECT_EQ(
      render("{{ n is odd }}{{ n is even }}{{ n is divisibleby 3 }}{{ 10 is divisibleby(4) }}",
             context),
      "truefalsetruefalse");
  EXPECT_EQ(render("{{ missing is defined }}{{ missing is undefined }}{{ s is not none }}"),
            "falsetruetrue");
  EXPECT_EQ(
      render("{{ 3 is eq 3 }}{{ 3 is ne 3 }}{{ 2 is lt 3 }}{{ 2 is gt 3 }}{{ 2 is in [1, 2] }}"),
      "truefalsetruefalsetrue");
  EXPECT_EQ(render("{{ true is true }}{{ 1 is true }}{{ true is boolean }}{{ range is callable }}"),
            "truefalsetruetrue");
  EXPECT_EQ(render("{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 'aB' is lower }}"), "truetruefalse");
}

TEST(JinjaTest, StringFilters) {
  EXPECT_EQ(render("[{{ '  pad \n'|trim }}] [{{ 'xxhixx'|trim('x') }}]"), "[pad] [hi]");
  EXPECT_EQ(render("{{ 'abc'|upper }} {{ 'ABC'|lower }} {{ 'hello'|capitalize }}"),
            "ABC abc Hello");
  // The reference renderer capitalizes word starts and leaves the rest as it is.
  EXPECT_EQ(render("{{ 'hello wORLD-foo'|title }}"), "Hello WORLD-Foo");
  EXPECT_EQ(render("{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }}"), "bbb bba");
  EXPECT_EQ(render("{{ 'a\nb\n\nc'|indent }}"), "a\n    b\n\n    c");
  EXPECT_EQ(render("{{ 'a\nb'|indent(2, true) }}"), "  a\n  b");
  EXPECT_EQ(render("{{ '<b>x</b> &amp;  y'|striptags }}"), "x & y");
  EXPECT_EQ(render("{{ '<a href=\"x\">'|e }}"), "&lt;a href=&#34;x&#34;&gt;");
  EXPECT_EQ(render("{{ 'one two, three'|wordcount }}"), "3");
  EXPECT_EQ(render("{{ ' 42 '|int }} {{ '3.5'|float }} {{ 'x'|int }} {{ 'x'|int(7) }}"),
            "42 3.5 0 7");
}

TEST(JinjaTest, ListFilters) {
  EXPECT_EQ(render("{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }}"),
            "[1, 2, 3] [3, 2, 1]");
  EXPECT_EQ(render("{{ ['b', 'a', 'B']|sort }} {{ ['b', 'a', 'B']|sort(case_sensitive=true) }}"),
            "[\"a\", \"b\", \"B\"] [\"B\", \"a\", \"b\"]");
  EXPECT_EQ(render("{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ [1, 2]|length }} "
                   "{{ [1, 2]|count }} {{ [1, 2]|reverse }}"),
            "1 3 2 2 [2, 1]");
  EXPECT_EQ(render("{{ [1, 2, 1, 3]|unique }} {{ 'ab'|list }}"), "[1, 2, 3] [\"a\", \"b\"]");
  EXPECT_EQ(render("{{ ['a', 'b']|join }} {{ [1, none, 'x']|join('-') }}"), "ab 1--x");
  EXPECT_EQ(render("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('odd')|list }}"),
            "[1, 3] [2]");
  EXPECT_EQ(render("{{ [1, 5, 2]|select('gt', 1)|list }} {{ ['a', '']|select|list }}"),
            "[5, 2] [\"a\"]");
  EXPECT_EQ(render("{{ ['a', 'b']|map('upper')|join }}"), "AB");
  EXPECT_EQ(render("{{ [1, 2, 3]|sum }} {{ [1, 2, 3]|sum(start=10) }} {{ [3, 1]|min }} "
                   "{{ [3, 1]|max }}"),
            "6 16 1 3");
  EXPECT_EQ(render("{{ [1, 2, 3, 4, 5]|batch(2) }} {{ [1, 2, 3]|batch(2, 0) }}"),
            "[[1, 2], [3, 4], [5]] [[1, 2], [3, 0]]");
  EXPECT_EQ(render("{{ 2.5|round }} {{ 3.14159|round(2) }} {{ 2.1|round(method='ceil') }} "
                   "{{ -3|abs }} {{ 3.7|int }} {{ 3|float }} {{ 5|string }}"),
            "2.0 3.14 3.0 3 3 3.0 5");
}

TEST(JinjaTest, AttributeFilters) {
  const Json context = {
      {"users", {{{"name", "b"}, {"age", 3}}, {{"name", "a"}, {"age", 1}}, {{"name", "c"}}}}};
  EXPECT_EQ(render("{{ users|map(attribute='name')|join(',') }}", context), "b,a,c");
  EXPECT_EQ(render("{{ users|map(attribute='age', default=0)|list }}", context), "[3, 1, 0]");
  EXPECT_EQ(render("{{ users|selectattr('age')|map(attribute='name')|join }}", context), "ba");
  EXPECT_EQ(render("{{ users|rejectattr('age')|map(attribute='name')|join }}", context), "c");
  EXPECT_EQ(
      render("{{ users|selectattr('name', 'equalto', 'a')|map(attribute='age')|first }}", context),
      "1");
  EXPECT_EQ(render("{{ users|sort(attribute='name')|map(attribute='name')|join }}", context),
            "abc");
  EXPECT_EQ(render("{{ users|join(', ', attribute='name') }}", context), "b, a, c");
}

TEST(JinjaTest, DictFiltersAndMethods) {
  const Json context = {{"d", {{"b", 2}, {"a", 1}}}};
  EXPECT_EQ(render("{{ d|items|list }} {{ d|dictsort }} {{ d|dictsort(by='value', reverse=true) }}",
                   context),
            "[[\"b\", 2], [\"a\", 1]] [[\"a\", 1], [\"b\", 2]] [[\"b\", 2], [\"a\", 1]]");
  EXPECT_EQ(render("{{ d.get('a') }} [{{ d.get('z') }}] {{ d.get('z', 0) }} {{ d.keys() }} "
                   "{{ d.values() }} {{ d|length }}",
                   context),
            "1 [] 0 [\"b\", \"a\"] [2, 1] 2");
  // A key named like a method does not hide the method when it is called.
  EXPECT_EQ(render("{{ s['items'] }} {{ s.items()|length }}", {{"s", {{"items", "x"}}}}), "x 1");
}

TEST(JinjaTest, DefaultFilter) {
  EXPECT_EQ(render("{{ missing|default('d') }} {{ ''|default('d') }}|{{ ''|default('d', true) }} "
                   "{{ none|default('d') }}|{{ 0|default('d', boolean=true) }} {{ missing|d }}|"),
            "d |d |d |");
}

TEST(JinjaTest, ToJson) {
  const Json context = {
      {"data", {{"name", "\u00e9"}, {"list", {1, 2.5, true, nullptr}}, {"empty", Json::object()}}}};
  EXPECT_EQ(render("{{ data|tojson }}", context),
            "{\"name\": \"\u00e9\", \"list\": [1, 2.5, true, null], \"empty\": {}}");
  EXPECT_EQ(
      render("{{ data|tojson(indent=2) }}", context),
      "{\n  \"name\": \"\u00e9\",\n  \"list\": [\n    1,\n    2.5,\n    true,\n    null\n  ],\n"
      "  \"empty\": {}\n}");
  EXPECT_EQ(
      render(
          "{{ data.name|tojson(ensure_ascii=true) }} {{ '\U0001F600'|tojson(ensure_ascii=true) }}",
          context),
      "\"\\u00e9\" \"\\ud83d\\ude00\"");
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1, 2]}|tojson(sort_keys=true, separators=(',', ':')) }}"),
            "{\"a\":[1,2],\"b\":1}");
  // Nested members sorted too, each level padded one indent deeper, empty values kept on one line
  // (as Python's json.dumps writes it).
  EXPECT_EQ(
      render("{{ {'b': {'d': 1, 'c': [{}, []]}, 'a': none}|tojson(sort_keys=true, indent=1) }}"),
      "{\n \"a\": null,\n \"b\": {\n  \"c\": [\n   {},\n   []\n  ],\n  \"d\": 1\n }\n}");
  EXPECT_EQ(render(R"({{ 'q"\\\n\t'|tojson }} {{ missing|tojson }})"), R"("q\"\\\n\t" null)");
}

TEST(JinjaTest, StringMethods) {
  EXPECT_EQ(render("[{{ '  a  '.strip() }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}]"),
            "[a][a  ][  a]");
  // With characters, as Python's str.strip: only those characters go.
  EXPECT_EQ(render("[{{ '\n x \n'.strip('\n') }}][{{ 'xxhixx'.lstrip('x') }}]"), "[ x ][hixx]");
  EXPECT_EQ(render("[{{ 'éaéé'.strip('é') }}][{{ 'abcba'.rstrip('ab') }}][{{ 'xxx'.strip('x') }}]"
                   "[{{ 'xxx'.rstrip('x') }}][{{ 'ééa'.lstrip('éa') }}]"),
            "[a][abc][][][]");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }}"),
            "[\"a\", \"b\", \"\", \"c\"] [\"a\", \"b\"] [\"a\", \"b c\"]");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }}"), "true true");
  EXPECT_EQ(render("{{ 'abc'.upper() }} {{ 'aXa'.replace('a', 'b') }} {{ 'abcb'.find('b') }} "
                   "{{ 'abcb'.count('b') }} {{ '-'.join(['a', 'b']) }}"),
            "ABC bXb 1 2 a-b");
  EXPECT_EQ(render("{{ [1, 2, 2].index(2) }} {{ [1, 2, 2].count(2) }}"), "1 2");
}

TEST(JinjaTest, ForLoops) {
  EXPECT_EQ(
      render("{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
             "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
      "1032truefalse3;2121falsefalse3;3210falsetrue3;");
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}"),
            "-2,1-3,2-,");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(
      render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"),
      "2/2 4/2 ");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"
                   "{% for k in {'x': 1} %}{{ k }}{% endfor %}"),
            "a=1;b=2;x");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 5 %}{% break %}{% endif %}"
                   "{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "024");
  EXPECT_EQ(render("{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} "
                   "{% endfor %}{{ loop.index }};{% endfor %}"),
            "1x1 1y2 1;2x1 2y2 2;");
}

TEST(JinjaTest, AssignmentsAndScopes) {
  // A loop's assignments stay in the loop; an if's do not.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}"),
            "21");
  EXPECT_EQ(render("{% if true %}{% set y = 3 %}{% endif %}{{ y }}"), "3");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{{ t[1] }}"), "124");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }} {{ ns }}"),
            "6 {\"n\": 6}");
  EXPECT_EQ(render("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns['b'] }}"), "12");
  EXPECT_EQ(render("{% set block %} x {{ 1 + 1 }} {% endset %}[{{ block }}]"), "[ x 2 ]");
  EXPECT_EQ(render("{{ dict(a=1, b='x') }}"), "{\"a\": 1, \"b\": \"x\"}");
}

// A namespace may hold itself, directly or through another namespace or a list. The render still
// frees them when it ends (the sanitizer build's leak check fails otherwise), and printing one
// stops at kMaxValueDepth instead of recursing until the stack runs out.
TEST(JinjaTest, NamespacesThatHoldThemselves) {
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns.self.self.a }}"), "1");
  EXPECT_EQ(render("{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = [b] %}"
                   "{{ a.b[0].a.b | length }}"),
            "1");
  EXPECT_PRED2(holds, error_of("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns }}"),
               "nests deeper than 512 levels");
  EXPECT_PRED2(holds,
               error_of("{% set ns = namespace(a=1) %}{% set ns.self = [ns] %}{{ ns | tojson }}"),
               "nests deeper than 512 levels");
  // A chain of namespaces a thousand long is freed without recursing through it.
  EXPECT_EQ(render("{% set ns = namespace(next=none) %}{% for i in range(1000) %}"
                   "{% set ns.next = namespace(next=ns.next) %}{% endfor %}done"),
            "done");
}

// Lists built in a loop nest at most kMaxValueDepth levels: deeper ones could not be printed,
// compared or freed without recursing that deep.
TEST(JinjaTest, ListsNestAtMostTheDepthLimit) {
  EXPECT_EQ(render("{% set ns = namespace(x=0) %}{% for i in range(511) %}{% set ns.x = [ns.x] %}"
                   "{% endfor %}{{ ns.x | length }}"),
            "1");
  EXPECT_PRED2(holds,
               error_of("{% set ns = namespace(x=0) %}{% for i in range(513) %}"
                        "{% set ns.x = [ns.x] %}{% endfor %}"),
               "lists nest deeper than 512 levels");
  EXPECT_PRED2(holds,
               error_of("{% set ns = namespace(x=0) %}{% for i in range(513) %}"
                        "{% set ns.x = {'a': ns.x} %}{% endfor %}"),
               "dicts nest deeper than 512 levels");
}

// A render has a budget of work (charge_work): loops nested past reason, a string doubled in a
// loop, or output that would outgrow memory fail with an error rather than running for hours or
// exhausting memory. Each of these stops within 256 MiB of work.
TEST(JinjaTest, RunawayTemplatesFailAtTheWorkBudget) {
  const std::string budget = "more work than a render may";
  EXPECT_PRED2(holds,
               error_of("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}"
                        "{% endfor %}"),
               budget);
  EXPECT_PRED2(holds,
               error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
               budget);
  EXPECT_PRED2(holds,
               error_of("{% set s = 'x' * 16000000 %}{% for i in range(20) %}{{ s }}{% endfor %}"),
               budget);
  EXPECT_PRED2(holds, error_of("{% set s = 'x' * 16000000 %}{{ s | replace('x', s) }}"), budget);
  EXPECT_PRED2(holds,
               error_of("{% set s = 'x' * 16000000 %}{{ (range(100) | map('string') | list) | "
                        "join(s) }}"),
               budget);
  EXPECT_PRED2(holds,
               error_of("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                        "{% endmacro %}{{ f(60) }}"),
               budget);
  // Output that multiplies its input is charged as it grows, before it is whole: 16 MB of lines
  // indented by 1 KB each (17 GB), or by a 16 MB string; a JSON list whose items repeat a long
  // padding or separator.
  EXPECT_PRED2(holds, error_of("{{ ('\n' * 16000000) | indent(1024, true, true) | length }}"),
               budget);
  EXPECT_PRED2(holds, error_of("{{ ('\n' * 1000) | indent('x' * 16000000, true, true) | length }}"),
               budget);
  EXPECT_PRED2(holds, error_of("{{ range(300000) | list | tojson(indent=1024) | length }}"),
               budget);
  EXPECT_PRED2(holds, error_of("{{ [1] | batch(1000000000000, 'x') | length }}"), budget);
  // Many small values count the memory they take: a long string split at every byte, or split
  // into its code points again for every index into it.
  EXPECT_PRED2(holds, error_of("{{ (',' * 16000000).split(',') | length }}"), budget);
  EXPECT_PRED2(holds,
               error_of("{% set s = 'x' * 16000000 %}{% for i in range(1000000) %}{{ s[5] }}"
                        "{% endfor %}"),
               budget);
  EXPECT_PRED2(holds, error_of("{{ ('x' * 16000000) | list | length }}"), budget);
  EXPECT_PRED2(holds, error_of("{% set s = 'ab' * 8000000 %}{{ s.strip(s) | length }}"), budget);
  // Work that grows with the square of a list: unique's comparisons, a dict built one member at
  // a time, a long dict looked up in a loop.
  EXPECT_PRED2(holds, error_of("{{ range(1000000) | unique | list | length }}"), budget);
  Json big = Json::object();
  // Appended to the members' vector: ordered_json's own insertion would take quadratic time.
  auto& members = big.get_ref<Json::object_t&>();
  for (int i = 0; i < 30000; ++i)
    members.push_back({"k" + std::to_string(i), i});
  EXPECT_PRED2(holds, error_of("{{ dict(big | items) | length }}", {{"big", big}}), budget);
  EXPECT_PRED2(
      holds, error_of("{% for i in range(1000000) %}{{ big.k29999 }}{% endfor %}", {{"big", big}}),
      budget);
  EXPECT_EQ(render("{{ dict(big | items) | length }}", {{"big", Json{{"a", 1}, {"b", 2}}}}), "2");
  EXPECT_PRED2(holds,
               error_of("{{ range(100000) | list | tojson(separators=['x' * 16000000, ':']) | "
                        "length }}"),
               budget);
  // A string is charged once, as it is built: each of these builds 224-240 MB of strings, which
  // fits, and would not if a result were charged again on top of its pieces (or a join charged a
  // separator before its first item, a replace its replacements twice, or tojson its text).
  // two_strings sets a to 16 MB and b to 64 MB.
  const std::string two_strings = "{% set a = 'x' * 16000000 %}{% set b = a ~ a ~ a ~ a %}";
  EXPECT_EQ(render("{% set a = 'x' * 16000000 %}{% set b = a ~ a %}{% set c = b ~ b %}"
                   "{{ (c ~ c) | length }}"),
            "128000000");
  EXPECT_EQ(render(two_strings + "{{ [b, a] | join('') | length }}"), "80000000");
  EXPECT_EQ(render(two_strings + "{{ b.join(['p', 'q']) | length }}"), "64000002");
  EXPECT_EQ(render(two_strings + "{{ a | replace('x', 'yyyy') | length }}"), "64000000");
  EXPECT_EQ(render(two_strings + "{{ a.replace('x', 'yyyy') | length }}"), "64000000");
  EXPECT_EQ(render(two_strings + "{{ [[b]] | tojson | length }} {{ [a] | tojson | length }}"),
            "64000006 16000004");
  // An ordinary long conversation is far inside it.
  Json messages = Json::array();
  for (int i = 0; i < 2000; ++i) {
    messages.push_back(
        {{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(2000, 'w')}});
  }
  EXPECT_EQ(render("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}",
                   {{"messages", messages}})
                .size(),
            2000u * 2000u + 1000u * (6u + 11u));
}

TEST(JinjaTest, Macros) {
  const std::string greet =
      "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}"
      "{% endmacro %}";
  EXPECT_EQ(
      render(greet + "{{ greet('Ann') }}|{{ greet('Bob', 'Hi') }}|{{ greet('Cy', punct='?') }}"
                     "|{{ greet(greeting='Yo', name='Di') }}"),
      "Hello, Ann!|Hi, Bob!|Hello, Cy?|Yo, Di!");
  EXPECT_EQ(
      render("{% macro m(a, b=a * 2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(2) }} {{ m(2, 5) }}"),
      "2-4 2-5");
  EXPECT_EQ(
      render("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}"),
      "1[2]{\"x\": 3}");
  EXPECT_EQ(render("{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{% endif %}{{ n }}{% endmacro %}"
                   "{{ m(3) }}"),
            "0123");
  EXPECT_EQ(render("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                   "{% call wrap('b') %}bold{% endcall %}"),
            "<b>bold</b>");
  EXPECT_EQ(render("{% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}"
                   "{% endmacro %}{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}"),
            "[1][2]");
}

TEST(JinjaTest, FilterBlocks) {
  EXPECT_EQ(render("{% filter upper %}hello {{ 'world' }}{% endfilter %}"), "HELLO WORLD");
  EXPECT_EQ(render("{% filter replace('a', 'o')|upper %}banana{% endfilter %}"), "BONONO");
}

TEST(JinjaTest, Globals) {
  EXPECT_EQ(render("{{ range(3) }} {{ range(1, 4) }} {{ range(10, 0, -3) }}"),
            "[0, 1, 2] [1, 2, 3] [10, 7, 4, 1]");
  const std::string year = render("{{ strftime_now('%Y') }}");
  EXPECT_EQ(year.size(), 4u);
  EXPECT_EQ(year.find_first_not_of("0123456789"), std::string::npos);
  // Context variables shadow globals.
  EXPECT_EQ(render("{{ range }}", {{"range", "mine"}}), "mine");
}

TEST(JinjaTest, RaiseExceptionCarriesItsMessage) {
  const std::string message = error_of(
      "{% for m in messages %}\n{% if m.role != 'user' %}\n"
      "{{ raise_exception('Only user messages, not ' ~ m.role) }}\n{% endif %}\n{% endfor %}",
      {{"messages", {{{"role", "tool"}}}}});
  EXPECT_NE(message.find("Only user messages, not tool"), std::string::npos) << message;
  EXPECT_NE(message.find("line 3"), std::string::npos) << message;
}

TEST(JinjaTest, UnsupportedConstructsNameTheConstructAndLine) {
  EXPECT_EQ(error_of("a\n\n{{ x|frobnicate }}"), "line 3: unsupported filter 'frobnicate'");
  EXPECT_EQ(error_of("a\n{% include 'other.html' %}"), "line 2: unsupported statement 'include'");
  EXPECT_EQ(error_of("{% frobnicate %}"), "line 1: unknown statement 'frobnicate'");
  EXPECT_EQ(error_of("\n{{ 1 is frobnicated }}"), "line 2: unsupported test 'frobnicated'");
  EXPECT_EQ(error_of("{{ 'a'.format(1) }}"), "line 1: unsupported method 'format' on string");
  EXPECT_EQ(error_of("{{ [1].append(2) }}"), "line 1: unsupported method 'append' on list");
  EXPECT_EQ(error_of("\n{{ nope() }}"), "line 2: unknown function 'nope'");
}

TEST(JinjaTest, MalformedTemplatesRaiseErrors) {
  EXPECT_EQ(error_of("{% if x %}\nyes"), "line 1: unclosed 'if' block: missing '{% endif %}'");
  EXPECT_EQ(error_of("{% for x in y %}\n{% if x %}\n{% endfor %}"),
            "line 3: unexpected '{% endfor %}' inside the 'if' block opened on line 2");
  EXPECT_EQ(error_of("{% break %}"), "line 1: 'break' outside of a for loop");
  for (const char* source : {"{{ x",
                             "{{ 'abc }}",
                             "{# open",
                             "{% if %}",
                             "{{ 1 + }}",
                             "{% for in x %}{% endfor %}",
                             "{% set = 1 %}",
                             "{% macro m( %}{% endmacro %}",
                             "{{ [1, 2 }}",
                             "{{ {'a' 1} }}",
                             "{{ x[] }}",
                             "{{ '\\q' }}",
                             "{% endif %}",
                             "{{ a.b. }}",
                             "{% set 1 = 2 %}",
                             "}}{{ )",
                             "{% call %}{% endcall %}",
                             "{{ x is }}",
                             "{{ x| }}",
                             "{% for x in y %}{% else %}"}) {
    EXPECT_NE(error_of(source), "") << source;
  }
}

TEST(JinjaTest, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(error_of("ok\n{{ 1 + none }}"), "line 2: cannot apply '+' to none");
  EXPECT_EQ(error_of("{% for a, b in [[1]] %}{% endfor %}"),
            "line 1: cannot unpack 1 items into 2 names");
  EXPECT_EQ(error_of("{% set d = {} %}\n{% set d.x = 1 %}"),
            "line 2: cannot set attribute 'x' on dict; only namespace() objects are mutable");
  EXPECT_EQ(error_of("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
            "line 1: macro 'm' takes at most 1 argument(s), got 2");
  EXPECT_NE(error_of("{{ [1, 'a']|sort }}"), "");
  EXPECT_NE(error_of("{{ missing + 1 }}"), "");
  EXPECT_NE(error_of("{{ 'x' ~ none }}"), "");
}

TEST(JinjaTest, RefusesRunawayNestingAndRecursion) {
  EXPECT_NE(error_of("{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}"), "");
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i)
    chain += " + 1";
  EXPECT_NE(error_of(chain + " }}"), "");
  std::string blocks;
  for (int i = 0; i < 5000; ++i)
    blocks += "{% if true %}";
  EXPECT_NE(error_of(blocks), "");
  EXPECT_NE(error_of("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"), "");
  EXPECT_NE(error_of("{{ range(100000000) }}"), "");
}

TEST(JinjaTest, ParsesOnceAndRendersConcurrently) {
  const JinjaTemplate tmpl = JinjaTemplate::parse(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}");
  const Json context = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                        {"add_generation_prompt", true}};
  EXPECT_EQ(tmpl.render(context), "<user>hi<assistant>");
  std::vector<std::thread> threads;
  std::vector<std::string> results(4);
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = tmpl.render(context); });
  }
  for (auto& t : threads)
    t.join();
  for (const auto& r : results)
    EXPECT_EQ(r, "<user>hi<assistant>");
  EXPECT_NE(error_of("{{ x }}", Json::array()), "");
}

}  // namespace
}  // namespace pagoda
