/*
 * check_schema.c — the walker on a table of its own, apart from ratelimitd's
 * options: defaults, every type, problems with their JSON paths, required and
 * unknown fields, the object check hook (on parse and after a dotted set),
 * a custom type, restart-only fields, freeing (ASan and valgrind watch).
 */
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include <jansson.h>

#include "schema.h"

struct inner {
    char *host;
    int64_t port;
};

struct item {
    char *name;
    int64_t weight;
};

struct top {
    char *s;
    int64_t i, d, z;
    int b, e;
    struct rl_strlist l;
    struct inner in;
    struct item *items;
    size_t nitems;
    size_t custom; /* the length of a JSON list */
};

static int custom_frees;

static void
parse_len(json_t *v, void *at, const char *path, struct schema_ctx *ctx)
{
    if (!json_is_array(v))
        schema_bad(ctx, path, "must be a list");
    else
        *(size_t *)at = json_array_size(v);
}

static void
free_len(void *at)
{
    *(size_t *)at = 0;
    custom_frees++;
}

static const struct schema_custom len_type = {parse_len, free_len, 1};

/* Port 13 is refused by the object's check, with the object's path. */
static void
check_inner(const void *obj, const char *path, struct schema_ctx *ctx)
{
    const struct inner *in = obj;

    if (in->port == 13)
        schema_bad_field(ctx, path, "port", "unlucky");
}

static const char *const colours[] = {"red", "green", NULL};

static const struct schema_field inner_fields[] = {
    {.name = "host", .type = SCHEMA_STRING, .off = offsetof(struct inner, host),
     .def = "\"localhost\"", .flags = SCHEMA_NONEMPTY | SCHEMA_RESTART},
    {.name = "port", .type = SCHEMA_INT, .off = offsetof(struct inner, port), .def = "80",
     .min = 1, .max = 65535},
};
static const struct schema inner_schema = {
    SCHEMA_FIELDS(inner_fields), sizeof(struct inner), check_inner, NULL
};

static const struct schema_field item_fields[] = {
    {.name = "name", .type = SCHEMA_STRING, .off = offsetof(struct item, name),
     .flags = SCHEMA_REQUIRED},
    {.name = "weight", .type = SCHEMA_INT, .off = offsetof(struct item, weight), .def = "1",
     .min = 0, .max = 9},
};
static const struct schema item_schema = {
    SCHEMA_FIELDS(item_fields), sizeof(struct item), NULL, NULL
};

static const struct schema_field top_fields[] = {
    {.name = "s", .type = SCHEMA_STRING, .off = offsetof(struct top, s)},
    {.name = "i", .type = SCHEMA_INT, .off = offsetof(struct top, i), .def = "5", .min = 1,
     .max = 10, .flags = SCHEMA_RESTART},
    {.name = "d", .type = SCHEMA_DURATION, .off = offsetof(struct top, d), .def = "\"1s\"",
     .min = 10, .max = 60000},
    {.name = "z", .type = SCHEMA_SIZE, .off = offsetof(struct top, z), .def = "\"1k\"",
     .min = 2, .max = 1024 * 1024},
    {.name = "b", .type = SCHEMA_BOOL, .off = offsetof(struct top, b), .def = "true"},
    {.name = "e", .type = SCHEMA_ENUM, .off = offsetof(struct top, e), .def = "\"green\"",
     .names = colours, .flags = SCHEMA_RESTART},
    {.name = "l", .type = SCHEMA_STRLIST, .off = offsetof(struct top, l),
     .flags = SCHEMA_RESTART},
    {.name = "in", .type = SCHEMA_OBJECT, .off = offsetof(struct top, in), .sub = &inner_schema},
    {.name = "items", .type = SCHEMA_ARRAY, .off = offsetof(struct top, items),
     .sub = &item_schema, .count_off = offsetof(struct top, nitems)},
    {.name = "custom", .type = SCHEMA_CUSTOM, .off = offsetof(struct top, custom),
     .custom = &len_type},
};
static const struct schema top_schema = {
    SCHEMA_FIELDS(top_fields), sizeof(struct top), NULL, NULL
};

/* Parse json over the defaults into *t; the problems go to errs. */
static void
parse(const char *json, struct top *t, struct rl_errors *errs)
{
    struct schema_ctx ctx = {"test.json", errs};
    json_error_t jerr;
    json_t *j = json_loads(json, 0, &jerr);

    ck_assert_msg(j != NULL, "bad test JSON: %s", jerr.text);
    memset(t, 0, sizeof(*t));
    schema_defaults(&top_schema, t);
    schema_parse(&top_schema, t, j, "", &ctx);
    json_decref(j);
}

/* errs holds exactly the messages of want, in order. */
static void
expect(const struct rl_errors *errs, const char *const *want, size_t n)
{
    for (size_t i = 0; i < errs->n && i < n; i++)
        ck_assert_str_eq(errs->msg[i], want[i]);
    ck_assert_uint_eq(errs->n, n);
}

START_TEST(defaults)
{
    struct top t = {0};

    schema_defaults(&top_schema, &t);
    ck_assert_ptr_null(t.s);
    ck_assert_int_eq(t.i, 5);
    ck_assert_int_eq(t.d, 1000);
    ck_assert_int_eq(t.z, 1024);
    ck_assert_int_eq(t.b, 1);
    ck_assert_int_eq(t.e, 1);
    ck_assert_str_eq(t.in.host, "localhost");
    ck_assert_int_eq(t.in.port, 80);
    ck_assert_uint_eq(t.nitems, 0);
    schema_free(&top_schema, &t);
    ck_assert_ptr_null(t.in.host);
}
END_TEST

START_TEST(every_type_parsed)
{
    struct rl_errors errs = {0};
    struct top t;

    custom_frees = 0;
    parse("{\"s\": \"x\", \"i\": 10, \"d\": \"30s\", \"z\": \"64k\", \"b\": false,"
          " \"e\": \"red\", \"l\": [\"a\", \"b\"], \"in\": {\"port\": 8080},"
          " \"items\": [{\"name\": \"p\"}, {\"name\": \"q\", \"weight\": 0}],"
          " \"custom\": [1, 2, 3], \"_comment\": \"skipped\"}",
          &t, &errs);
    expect(&errs, NULL, 0);
    ck_assert_str_eq(t.s, "x");
    ck_assert_int_eq(t.i, 10);
    ck_assert_int_eq(t.d, 30000);
    ck_assert_int_eq(t.z, 65536);
    ck_assert_int_eq(t.b, 0);
    ck_assert_int_eq(t.e, 0);
    ck_assert_uint_eq(t.l.n, 2);
    ck_assert_str_eq(t.l.v[1], "b");
    ck_assert_str_eq(t.in.host, "localhost"); /* the default stays */
    ck_assert_int_eq(t.in.port, 8080);
    ck_assert_uint_eq(t.nitems, 2);
    ck_assert_str_eq(t.items[1].name, "q");
    ck_assert_int_eq(t.items[0].weight, 1); /* elements get their defaults */
    ck_assert_int_eq(t.items[1].weight, 0);
    ck_assert_uint_eq(t.custom, 3);
    schema_free(&top_schema, &t);
    ck_assert_int_eq(custom_frees, 1);
    ck_assert_ptr_null(t.items);
    ck_assert_uint_eq(t.nitems, 0);
}
END_TEST

START_TEST(problems_with_paths)
{
    static const char *const want[] = {
        "test.json: s: must be a string",
        "test.json: i: must be between 1 and 10",
        "test.json: d: must be between 10ms and 60000ms",
        "test.json: z: must be a size like \"64k\", \"1m\" or a number of bytes",
        "test.json: b: must be true or false",
        "test.json: e: must be one of red, green",
        "test.json: l[1]: must be a string of 1..512 bytes",
        "test.json: in.host: must not be empty",
        "test.json: in.colour: unknown option",
        "test.json: in.port: unlucky",
        "test.json: items[0].weight: must be an integer",
        "test.json: items[1]: must be an object",
        "test.json: items[2].name: is required",
        "test.json: custom: must be a list",
    };
    struct rl_errors errs = {0};
    struct top t;

    parse("{\"s\": 1, \"i\": 11, \"d\": \"5ms\", \"z\": \"1q\", \"b\": 0, \"e\": \"blue\","
          " \"l\": [\"a\", \"\"], \"in\": {\"host\": \"\", \"colour\": 1, \"port\": 13},"
          " \"items\": [{\"name\": \"p\", \"weight\": \"heavy\"}, 7, {}],"
          " \"custom\": {}}",
          &t, &errs);
    expect(&errs, want, RL_ARRAY_LEN(want));
    errors_free(&errs);
    ck_assert_uint_eq(errs.n, 0);
    schema_free(&top_schema, &t);
}
END_TEST

START_TEST(set_by_dotted_name)
{
    struct rl_errors errs = {0};
    struct schema_ctx ctx = {"-x", &errs};
    struct top t = {0};

    schema_defaults(&top_schema, &t);
    ck_assert_int_eq(schema_set(&top_schema, &t, "i", "7", &ctx), RL_OK);
    ck_assert_int_eq(t.i, 7);
    ck_assert_int_eq(schema_set(&top_schema, &t, "d", "250ms", &ctx), RL_OK);
    ck_assert_int_eq(t.d, 250);
    ck_assert_int_eq(schema_set(&top_schema, &t, "b", "false", &ctx), RL_OK);
    ck_assert_int_eq(t.b, 0);
    ck_assert_int_eq(schema_set(&top_schema, &t, "custom", "[1, 2]", &ctx), RL_OK);
    ck_assert_uint_eq(t.custom, 2);
    ck_assert_int_eq(schema_set(&top_schema, &t, "in.port", "443", &ctx), RL_OK);
    ck_assert_int_eq(t.in.port, 443);
    ck_assert_uint_eq(errs.n, 0);
    /* the object holding the field is checked again, at its own path */
    ck_assert_int_eq(schema_set(&top_schema, &t, "in.port", "13", &ctx), RL_ERR);
    ck_assert_int_eq(schema_set(&top_schema, &t, "in", "x", &ctx), RL_ERR);
    ck_assert_int_eq(schema_set(&top_schema, &t, "i.x", "1", &ctx), RL_ERR);
    ck_assert_int_eq(schema_set(&top_schema, &t, "items", "[]", &ctx), RL_ERR);
    ck_assert_int_eq(schema_set(&top_schema, &t, "i", "0", &ctx), RL_ERR);
    {
        static const char *const want[] = {
            "-x: in.port: unlucky",
            "-x: in: not an option that can be set here",
            "-x: i.x: not an option that can be set here",
            "-x: items: not an option that can be set here",
            "-x: i: must be between 1 and 10",
        };
        expect(&errs, want, RL_ARRAY_LEN(want));
    }
    errors_free(&errs);
    schema_free(&top_schema, &t);
}
END_TEST

START_TEST(restart_only_fields_kept)
{
    struct rl_errors errs = {0}, changed = {0};
    struct top old, next;

    parse("{\"i\": 3, \"e\": \"red\", \"l\": [\"a\"], \"in\": {\"host\": \"h1\"}}", &old, &errs);
    parse("{\"i\": 4, \"e\": \"red\", \"l\": [\"a\", \"b\"], \"in\": {\"host\": \"h2\", "
          "\"port\": 81}, \"d\": \"2s\"}",
          &next, &errs);
    ck_assert_uint_eq(errs.n, 0);
    schema_keep_restart(&top_schema, &next, &old, "", &changed);
    {
        static const char *const want[] = {"i", "l", "in.host"};
        expect(&changed, want, RL_ARRAY_LEN(want));
    }
    ck_assert_int_eq(next.i, 3);
    ck_assert_uint_eq(next.l.n, 1);
    ck_assert_str_eq(next.in.host, "h1");
    ck_assert_int_eq(next.in.port, 81); /* reloadable: the new value */
    ck_assert_int_eq(next.d, 2000);
    errors_free(&changed);
    schema_free(&top_schema, &old);
    schema_free(&top_schema, &next);
}
END_TEST

static Suite *
schema_suite(void)
{
    Suite *s = suite_create("schema");
    TCase *tc = tcase_create("walker");

    tcase_add_test(tc, defaults);
    tcase_add_test(tc, every_type_parsed);
    tcase_add_test(tc, problems_with_paths);
    tcase_add_test(tc, set_by_dotted_name);
    tcase_add_test(tc, restart_only_fields_kept);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    return rl_unit_run(schema_suite(), CK_NOFORK);
}
