/*
 * schema.c — the one walker: defaults, parsing, setting one field by name,
 * freeing and restart-only fields, all driven by the rows of a table.
 *
 * A field's default is JSON text parsed by the same code as the file, so a
 * default cannot hold a value the file could not.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "schema.h"
#include "util.h"

#define AT(obj, off, type) ((type *)(void *)((char *)(obj) + (off)))
#define AT_CONST(obj, off, type) ((const type *)(const void *)((const char *)(obj) + (off)))

#define DURATION_HINT "a duration like \"500ms\", \"10s\", \"1m\", \"1h\""
#define SIZE_HINT "a size like \"64k\", \"1m\" or a number of bytes"

/* ---- problems -------------------------------------------------------- */

void
errors_add(struct rl_errors *e, const char *fmt, ...)
{
    va_list ap;

    e->total++;
    if (e->n < RL_ERRORS_MAX) {
        va_start(ap, fmt);
        e->msg = xrealloc(e->msg, (e->n + 1) * sizeof(*e->msg));
        e->msg[e->n++] = xvasprintf(fmt, ap);
        va_end(ap);
        return;
    }
    /* past the bound (a broken file can have a problem per line): one last
     * line counts the rest */
    if (e->n == RL_ERRORS_MAX) {
        e->msg = xrealloc(e->msg, (e->n + 1) * sizeof(*e->msg));
        e->n++;
    } else {
        free(e->msg[RL_ERRORS_MAX]);
    }
    e->msg[RL_ERRORS_MAX] = xasprintf("... and %zu more problems", e->total - RL_ERRORS_MAX);
}

static void
free_strings(char ***v, size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        free((*v)[i]);
    free(*v);
    *v = NULL;
    *n = 0;
}

void
errors_free(struct rl_errors *e)
{
    free_strings(&e->msg, &e->n);
    e->total = 0;
}

int
errors_read_file(struct rl_errors *e, const char *file, size_t max, char **text, size_t *len)
{
    char *cause = NULL;

    if (read_file_bounded(file, max, text, len, &cause) == RL_OK)
        return RL_OK;
    errors_add(e, "%s", cause);
    free(cause);
    return RL_ERR;
}

static void RL_PRINTF(3, 0)
    bad_v(struct schema_ctx *ctx, const char *path, const char *fmt, va_list ap)
{
    char *what = xvasprintf(fmt, ap);

    if (ctx->origin != NULL)
        errors_add(ctx->errs, "%s: %s: %s", ctx->origin, path, what);
    else
        errors_add(ctx->errs, "%s: %s", path, what);
    free(what);
}

bool
schema_problem_at(const struct schema_ctx *ctx, const char *path, const char *name)
{
    char *want = ctx->origin != NULL ? xasprintf("%s: %s.%s: ", ctx->origin, path, name)
                                     : xasprintf("%s.%s: ", path, name);
    size_t n = strlen(want);
    bool found = false;

    for (size_t i = 0; i < ctx->errs->n && !found; i++)
        found = strncmp(ctx->errs->msg[i], want, n) == 0;
    free(want);
    return found;
}

void
schema_bad(struct schema_ctx *ctx, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bad_v(ctx, path, fmt, ap);
    va_end(ap);
}

static char *
join_path(const char *path, const char *name)
{
    return *path ? xasprintf("%s.%s", path, name) : xstrdup(name);
}

void
schema_bad_field(struct schema_ctx *ctx, const char *path, const char *name, const char *fmt,
                 ...)
{
    char *fp = join_path(path, name);
    va_list ap;
    va_start(ap, fmt);
    bad_v(ctx, fp, fmt, ap);
    va_end(ap);
    free(fp);
}

void
schema_bad_item(struct schema_ctx *ctx, const char *path, size_t i, const char *fmt, ...)
{
    char *ip = xasprintf("%s[%zu]", path, i);
    va_list ap;
    va_start(ap, fmt);
    bad_v(ctx, ip, fmt, ap);
    va_end(ap);
    free(ip);
}

/* ---- scalar parsers ---------------------------------------------------- */

/* The digits of s and where they end; RL_ERR unless s starts with one. */
static int
leading_number(const char *s, long long *v, char **end)
{
    if (!isdigit((unsigned char)s[0]))
        return RL_ERR;
    errno = 0;
    *v = strtoll(s, end, 10);
    return errno == 0 ? RL_OK : RL_ERR;
}

int
schema_parse_duration_ms(const char *s, int64_t *out)
{
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {
        {"ms", 1},
        {"s", 1000},
        {"m", 60 * 1000},
        {"h", 3600 * 1000},
    };
    char *end;
    long long v;

    if (leading_number(s, &v, &end) != RL_OK)
        return RL_ERR;
    for (size_t i = 0; i < RL_ARRAY_LEN(units); i++) {
        if (strcmp(end, units[i].unit) == 0) {
            if (v > INT64_MAX / units[i].ms)
                return RL_ERR;
            *out = (int64_t)v * units[i].ms;
            return RL_OK;
        }
    }
    return RL_ERR;
}

int
schema_parse_size(const char *s, int64_t *out)
{
    char *end;
    int64_t mult = 1;
    long long v;

    if (leading_number(s, &v, &end) != RL_OK)
        return RL_ERR;
    if (*end == 'k' || *end == 'K')
        mult = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mult = 1024 * 1024, end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0' || v > INT64_MAX / mult)
        return RL_ERR;
    *out = (int64_t)v * mult;
    return RL_OK;
}

/* ---- freeing ------------------------------------------------------------ */

static void
free_strlist(struct rl_strlist *l)
{
    free_strings(&l->v, &l->n);
}

static void
free_array(const struct schema_field *f, void *obj)
{
    char **arr = AT(obj, f->off, char *);
    size_t *n = AT(obj, f->count_off, size_t);

    for (size_t i = 0; i < *n; i++)
        schema_free(f->sub, *arr + i * f->sub->size);
    free(*arr);
    *arr = NULL;
    *n = 0;
}

static void
free_field(const struct schema_field *f, void *obj)
{
    switch (f->type) {
    case SCHEMA_STRING: {
        char **sp = AT(obj, f->off, char *);
        free(*sp);
        *sp = NULL;
        break;
    }
    case SCHEMA_STRLIST: free_strlist(AT(obj, f->off, struct rl_strlist)); break;
    case SCHEMA_OBJECT: schema_free(f->sub, AT(obj, f->off, char)); break;
    case SCHEMA_ARRAY: free_array(f, obj); break;
    case SCHEMA_CUSTOM: f->custom->free(AT(obj, f->off, char)); break;
    default: break;
    }
}

void
schema_free(const struct schema *s, void *obj)
{
    if (s->clear != NULL)
        s->clear(obj);
    for (size_t i = 0; i < s->nfields; i++)
        free_field(&s->fields[i], obj);
}

/* ---- parsing one field -------------------------------------------------- */

static void
parse_string(const struct schema_field *f, void *obj, json_t *v, const char *path,
             struct schema_ctx *ctx)
{
    char **sp = AT(obj, f->off, char *);

    if (!json_is_string(v)) {
        schema_bad(ctx, path, "must be a string");
    } else if ((f->flags & SCHEMA_NONEMPTY) && json_string_length(v) == 0) {
        schema_bad(ctx, path, "must not be empty");
    } else if (strlen(json_string_value(v)) != json_string_length(v)) {
        schema_bad(ctx, path, "must not contain NUL bytes");
    } else {
        free(*sp);
        *sp = xstrdup(json_string_value(v));
    }
}

static int
number_value(const struct schema_field *f, json_t *v, int64_t *out)
{
    const char *s = json_string_value(v);

    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return RL_OK;
    }
    if (s != NULL && f->type == SCHEMA_DURATION)
        return schema_parse_duration_ms(s, out);
    if (s != NULL && f->type == SCHEMA_SIZE)
        return schema_parse_size(s, out);
    return RL_ERR;
}

static void
parse_number(const struct schema_field *f, void *obj, json_t *v, const char *path,
             struct schema_ctx *ctx)
{
    int64_t iv;

    if (number_value(f, v, &iv) != RL_OK) {
        schema_bad(ctx, path, "must be %s",
                   f->type == SCHEMA_DURATION ? DURATION_HINT
                   : f->type == SCHEMA_SIZE   ? SIZE_HINT
                                              : "an integer");
    } else if (iv < f->min || iv > f->max) {
        schema_bad(ctx, path, "must be between %lld%s and %lld%s", (long long)f->min,
                   f->type == SCHEMA_DURATION ? "ms" : "", (long long)f->max,
                   f->type == SCHEMA_DURATION ? "ms" : "");
    } else {
        *AT(obj, f->off, int64_t) = iv;
    }
}

static void
parse_enum(const struct schema_field *f, void *obj, json_t *v, const char *path,
           struct schema_ctx *ctx)
{
    const char *s = json_string_value(v);
    char list[256] = "";

    for (int i = 0; s != NULL && f->names[i] != NULL; i++) {
        if (strcmp(s, f->names[i]) == 0) {
            *AT(obj, f->off, int) = i;
            return;
        }
    }
    for (int i = 0; f->names[i] != NULL; i++) {
        strncat(list, i ? ", " : "", sizeof(list) - strlen(list) - 1);
        strncat(list, f->names[i], sizeof(list) - strlen(list) - 1);
    }
    schema_bad(ctx, path, "must be one of %s", list);
}

static void
parse_strlist(const struct schema_field *f, void *obj, json_t *v, const char *path,
              struct schema_ctx *ctx)
{
    struct rl_strlist *l = AT(obj, f->off, struct rl_strlist);
    size_t i;
    json_t *e;

    free_strlist(l);
    if (!json_is_array(v) || json_array_size(v) == 0) {
        schema_bad(ctx, path, "must be a non-empty list of strings");
        return;
    }
    l->v = xcalloc(json_array_size(v), sizeof(*l->v));
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || json_string_length(e) == 0 ||
            json_string_length(e) > RL_KEY_MAX ||
            strlen(json_string_value(e)) != json_string_length(e)) {
            schema_bad_item(ctx, path, i, "must be a string of 1..%d bytes", RL_KEY_MAX);
            continue;
        }
        l->v[l->n++] = xstrdup(json_string_value(e));
    }
}

static void
parse_array(const struct schema_field *f, void *obj, json_t *v, const char *path,
            struct schema_ctx *ctx)
{
    char **arr = AT(obj, f->off, char *);
    size_t *n = AT(obj, f->count_off, size_t);
    size_t i;
    json_t *e;

    if (!json_is_array(v)) {
        schema_bad(ctx, path, "must be a list of objects");
        return;
    }
    free_array(f, obj);
    *arr = xcalloc(json_array_size(v), f->sub->size);
    json_array_foreach(v, i, e) {
        char *ep = xasprintf("%s[%zu]", path, i);
        void *elem = *arr + i * f->sub->size;
        schema_defaults(f->sub, elem);
        if (!json_is_object(e))
            schema_bad(ctx, ep, "must be an object");
        else
            schema_parse(f->sub, elem, e, ep, ctx);
        *n = i + 1;
        free(ep);
    }
}

static void
parse_field(const struct schema_field *f, void *obj, json_t *v, const char *path,
            struct schema_ctx *ctx)
{
    switch (f->type) {
    case SCHEMA_STRING: parse_string(f, obj, v, path, ctx); break;
    case SCHEMA_INT:
    case SCHEMA_DURATION:
    case SCHEMA_SIZE: parse_number(f, obj, v, path, ctx); break;
    case SCHEMA_BOOL:
        if (!json_is_boolean(v))
            schema_bad(ctx, path, "must be true or false");
        else
            *AT(obj, f->off, int) = json_is_true(v);
        break;
    case SCHEMA_ENUM: parse_enum(f, obj, v, path, ctx); break;
    case SCHEMA_STRLIST: parse_strlist(f, obj, v, path, ctx); break;
    case SCHEMA_OBJECT:
        if (!json_is_object(v))
            schema_bad(ctx, path, "must be an object");
        else
            schema_parse(f->sub, AT(obj, f->off, char), v, path, ctx);
        break;
    case SCHEMA_ARRAY: parse_array(f, obj, v, path, ctx); break;
    case SCHEMA_CUSTOM: f->custom->parse(v, AT(obj, f->off, char), path, ctx); break;
    }
}

/* ---- objects --------------------------------------------------------------- */

static const struct schema_field *
find_field(const struct schema *s, const char *name)
{
    for (size_t i = 0; i < s->nfields; i++)
        if (strcmp(s->fields[i].name, name) == 0)
            return &s->fields[i];
    return NULL;
}

void
schema_parse(const struct schema *s, void *obj, json_t *j, const char *path,
             struct schema_ctx *ctx)
{
    const char *name;
    json_t *v;

    json_object_foreach(j, name, v) {
        /* JSON has no comments: keys starting with '_' are ours to skip. */
        if (name[0] == '_')
            continue;
        const struct schema_field *f = find_field(s, name);
        char *fp = join_path(path, name);
        if (f == NULL)
            schema_bad(ctx, fp, "unknown option");
        else
            parse_field(f, obj, v, fp, ctx);
        free(fp);
    }
    for (size_t i = 0; i < s->nfields; i++)
        if ((s->fields[i].flags & SCHEMA_REQUIRED) &&
            json_object_get(j, s->fields[i].name) == NULL &&
            (s->fields[i].required_if == NULL || s->fields[i].required_if(obj)))
            schema_bad_field(ctx, path, s->fields[i].name, "is required");
    if (s->check != NULL)
        s->check(obj, path, ctx);
}

void
schema_defaults(const struct schema *s, void *obj)
{
    struct rl_errors errs = {0};
    struct schema_ctx ctx = {"built-in default", &errs};

    for (size_t i = 0; i < s->nfields; i++) {
        const struct schema_field *f = &s->fields[i];
        if (f->type == SCHEMA_OBJECT)
            schema_defaults(f->sub, AT(obj, f->off, char));
        if (f->def == NULL)
            continue;
        json_t *v = json_loads(f->def, JSON_DECODE_ANY, NULL);
        parse_field(f, obj, v, f->name, &ctx);
        json_decref(v);
    }
    /* The defaults are ours: a broken one is a bug, not a user error. */
    if (errs.n != 0) {
        fprintf(stderr, "%s\n", errs.msg[0]);
        abort();
    }
}

/* ---- one field by name -------------------------------------------------------- */

/* The field a dotted name leads to, and the schema and object holding it. */
static const struct schema_field *
find_dotted(const struct schema **s, void **obj, const char *name)
{
    const struct schema_field *f = NULL;
    char *copy = xstrdup(name), *part, *save = NULL;

    for (part = strtok_r(copy, ".", &save); part != NULL; part = strtok_r(NULL, ".", &save)) {
        if (f != NULL) {
            if (f->type != SCHEMA_OBJECT) {
                f = NULL;
                break;
            }
            *obj = AT(*obj, f->off, char);
            *s = f->sub;
        }
        if ((f = find_field(*s, part)) == NULL)
            break;
    }
    free(copy);
    return f;
}

/* Text from a flag as the JSON value a file would hold. */
static json_t *
text_value(const struct schema_field *f, const char *text)
{
    json_t *v = NULL;

    if ((f->type == SCHEMA_INT || f->type == SCHEMA_DURATION || f->type == SCHEMA_SIZE) &&
        text[0] != '\0' && strspn(text, "0123456789") == strlen(text))
        v = json_loads(text, JSON_DECODE_ANY, NULL);
    else if (f->type == SCHEMA_BOOL &&
             (strcmp(text, "true") == 0 || strcmp(text, "false") == 0))
        v = json_loads(text, JSON_DECODE_ANY, NULL);
    else if (f->type == SCHEMA_CUSTOM && f->custom->text_is_json)
        v = json_loads(text, JSON_DECODE_ANY, NULL);
    else if (f->type == SCHEMA_STRLIST && text[0] == '[') /* a JSON list */
        v = json_loads(text, JSON_DECODE_ANY, NULL);
    return v != NULL ? v : json_string(text);
}

static int
set_field(const struct schema *top, void *obj, const char *name, const char *text, int defer,
          struct schema_ctx *ctx)
{
    const struct schema *s = top;
    void *root = obj;
    const struct schema_field *f = find_dotted(&s, &obj, name);
    size_t before = ctx->errs->total;
    json_t *v;

    if (f == NULL || f->type == SCHEMA_OBJECT || f->type == SCHEMA_ARRAY) {
        schema_bad(ctx, name, "not an option that can be set here");
        return RL_ERR;
    }
    v = text_value(f, text);
    parse_field(f, obj, v, name, ctx);
    json_decref(v);
    if (!defer && ctx->errs->total == before)
        return schema_check_parent(top, root, name, ctx);
    return ctx->errs->total == before ? RL_OK : RL_ERR;
}

int
schema_set(const struct schema *top, void *obj, const char *name, const char *text,
           struct schema_ctx *ctx)
{
    return set_field(top, obj, name, text, 0, ctx);
}

int
schema_set_deferred(const struct schema *top, void *obj, const char *name, const char *text,
                    struct schema_ctx *ctx)
{
    return set_field(top, obj, name, text, 1, ctx);
}

int
schema_check_parent(const struct schema *top, void *obj, const char *name,
                    struct schema_ctx *ctx)
{
    const struct schema *s = top;
    const struct schema_field *f = find_dotted(&s, &obj, name);
    size_t before = ctx->errs->total;

    /* sub-objects re-check here, at their own path ("redis" for
     * "redis.url"); the top level waits for every source */
    if (f != NULL && s != top && s->check != NULL) {
        const char *dot = strrchr(name, '.');
        char *parent = xstrndup(name, dot ? (size_t)(dot - name) : 0);
        s->check(obj, parent, ctx);
        free(parent);
    }
    return ctx->errs->total == before ? RL_OK : RL_ERR;
}

/* ---- restart-only fields ----------------------------------------------------- */

static void
keep_string(char **ns, char *const *os, const char *path, struct rl_errors *changed)
{
    if ((*ns == NULL) != (*os == NULL) || (*ns != NULL && strcmp(*ns, *os) != 0))
        errors_add(changed, "%s", path);
    free(*ns);
    *ns = *os ? xstrdup(*os) : NULL;
}

static void
keep_strlist(struct rl_strlist *nl, const struct rl_strlist *ol, const char *path,
             struct rl_errors *changed)
{
    int same = nl->n == ol->n;

    for (size_t k = 0; same && k < nl->n; k++)
        same = strcmp(nl->v[k], ol->v[k]) == 0;
    if (!same)
        errors_add(changed, "%s", path);
    free_strlist(nl);
    nl->v = xcalloc(ol->n ? ol->n : 1, sizeof(*nl->v));
    for (size_t k = 0; k < ol->n; k++)
        nl->v[k] = xstrdup(ol->v[k]);
    nl->n = ol->n;
}

static void
keep_field(const struct schema_field *f, void *np, const void *op, const char *path,
           struct rl_errors *changed)
{
    if (f->type == SCHEMA_STRING) {
        keep_string(np, op, path, changed);
    } else if (f->type == SCHEMA_STRLIST) {
        keep_strlist(np, op, path, changed);
    } else if (f->type == SCHEMA_ENUM || f->type == SCHEMA_BOOL) {
        if (*(int *)np != *(const int *)op)
            errors_add(changed, "%s", path);
        *(int *)np = *(const int *)op;
    } else {
        if (*(int64_t *)np != *(const int64_t *)op)
            errors_add(changed, "%s", path);
        *(int64_t *)np = *(const int64_t *)op;
    }
}

void
schema_keep_restart(const struct schema *s, void *nobj, const void *oobj, const char *path,
                    struct rl_errors *changed)
{
    for (size_t i = 0; i < s->nfields; i++) {
        const struct schema_field *f = &s->fields[i];
        char *fp = join_path(path, f->name);
        if (f->type == SCHEMA_OBJECT)
            schema_keep_restart(f->sub, AT(nobj, f->off, char), AT_CONST(oobj, f->off, char),
                                fp, changed);
        else if (f->flags & SCHEMA_RESTART)
            keep_field(f, AT(nobj, f->off, char), AT_CONST(oobj, f->off, char), fp, changed);
        free(fp);
    }
}
