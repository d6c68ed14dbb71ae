/*
 * schema.h — a JSON object walked against a table of rows, one row per
 * field: its type, where it lands in a C struct, its default, bounds and
 * flags.  The walker knows nothing of ratelimitd's options; config.c holds
 * the tables and their checks.
 *
 * Problems are collected, not returned one at a time: `ratelimitd -t` reports
 * every mistake of a file at once, each as "ORIGIN: json.path: what".
 */
#ifndef RL_SCHEMA_H
#define RL_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rl.h"

struct json_t;

enum schema_type {
    SCHEMA_STRING,
    SCHEMA_INT,
    SCHEMA_DURATION, /* "500ms", "10s", "1m", "1h" or milliseconds */
    SCHEMA_SIZE,     /* "64k", "1m" or bytes */
    SCHEMA_BOOL,
    SCHEMA_ENUM,    /* a string from .names, stored as its index (an int) */
    SCHEMA_STRLIST, /* struct rl_strlist of 1..RL_KEY_MAX byte strings */
    SCHEMA_OBJECT,  /* a struct of its own, described by .sub */
    SCHEMA_ARRAY,   /* a pointer to .sub elements, counted at .count_off */
    SCHEMA_CUSTOM   /* parsed and freed by .custom */
};

#define SCHEMA_REQUIRED 0x1 /* must be present in its object */
#define SCHEMA_RESTART 0x2  /* a reload cannot change it; logged when it differs */
#define SCHEMA_NONEMPTY 0x4 /* SCHEMA_STRING: "" is not a value */

struct schema;
struct schema_ctx;

struct rl_strlist {
    char **v;
    size_t n;
};

/* A type the walker does not know: the table's module parses it. */
struct schema_custom {
    void (*parse)(struct json_t *v, void *at, const char *path, struct schema_ctx *ctx);
    void (*free)(void *at);
    int text_is_json; /* schema_set: the text is JSON (a list), not a string */
};

/* One row, written with designated initialisers; what is left out is 0. */
struct schema_field {
    const char *name;
    enum schema_type type;
    size_t off;               /* offsetof the value in its struct */
    const char *def;          /* default as JSON text; NULL: zero */
    int64_t min, max;         /* INT, DURATION, SIZE */
    const char *const *names; /* ENUM: by value, NULL-terminated */
    const struct schema *sub; /* OBJECT, ARRAY */
    const struct schema_custom *custom;
    size_t count_off; /* ARRAY: offsetof its size_t count */
    unsigned flags;   /* SCHEMA_* */
    /* SCHEMA_REQUIRED only when this says so of the object parsed (its other
     * fields read); NULL: always */
    bool (*required_if)(const void *obj);
};

/* Problems found while loading, each "ORIGIN: path: what is wrong": the
 * first RL_ERRORS_MAX of them, then one line "... and K more problems". */
struct rl_errors {
    char **msg;
    size_t n;     /* lines in msg: at most RL_ERRORS_MAX + 1 */
    size_t total; /* problems added: compare it to see whether one was */
};

#define RL_ERRORS_MAX 100

void errors_add(struct rl_errors *e, const char *fmt, ...) RL_PRINTF(2, 3);
void errors_free(struct rl_errors *e);
/* A whole file of at most max bytes (read_file_bounded), its problem added
 * to e. */
int errors_read_file(struct rl_errors *e, const char *file, size_t max, char **text,
                     size_t *len) RL_WUR;

/* Where values come from ("a file name", "-l", "RATELIMITD_LISTEN"; NULL:
 * a request, whose problems read "path: what") and where their problems
 * go. */
struct schema_ctx {
    const char *origin;
    struct rl_errors *errs;
};

struct schema {
    const struct schema_field *fields;
    size_t nfields;
    size_t size; /* of one element, for SCHEMA_ARRAY */
    /* Cross-field validation once the object is parsed; reads, never
     * writes: what is derived from the fields is built after loading. */
    void (*check)(const void *obj, const char *path, struct schema_ctx *ctx);
    /* Frees what was derived from the fields, before the fields go. */
    void (*clear)(void *obj);
};

#define SCHEMA_FIELDS(a) (a), RL_ARRAY_LEN(a)

/* A problem at path, at path.name, at path[i]. */
void schema_bad(struct schema_ctx *ctx, const char *path, const char *fmt, ...)
    RL_PRINTF(3, 4);
void schema_bad_field(struct schema_ctx *ctx, const char *path, const char *name,
                      const char *fmt, ...) RL_PRINTF(4, 5);
void schema_bad_item(struct schema_ctx *ctx, const char *path, size_t i, const char *fmt, ...)
    RL_PRINTF(4, 5);

/* Whether a problem was reported at path.name already: a check hook then
 * says nothing more of a field that did not parse. */
bool schema_problem_at(const struct schema_ctx *ctx, const char *path, const char *name);

/* Every field of obj to its default, sub-objects too. */
void schema_defaults(const struct schema *s, void *obj);

/* Apply the JSON object j to obj; unknown keys are problems, except those
 * starting with '_' (JSON has no comments). */
void schema_parse(const struct schema *s, void *obj, struct json_t *j, const char *path,
                  struct schema_ctx *ctx);

/*
 * Set one field by its dotted name ("redis.url") from text (a flag or the
 * environment).  The object holding it is checked again (not by
 * schema_set_deferred: several fields of one object set in turn, rls.tls's
 * cert_file and key_file, are checked together by schema_check_parent
 * after the last);
 * the top level is not (its check needs every source applied).
 */
int schema_set(const struct schema *top, void *obj, const char *name, const char *text,
               struct schema_ctx *ctx) RL_WUR;
int schema_set_deferred(const struct schema *top, void *obj, const char *name,
                        const char *text, struct schema_ctx *ctx) RL_WUR;

/* The check of the object holding the dotted name's field (none at the top
 * level).  RL_ERR when it found a problem. */
int schema_check_parent(const struct schema *top, void *obj, const char *name,
                        struct schema_ctx *ctx) RL_WUR;

void schema_free(const struct schema *s, void *obj);

/* SCHEMA_RESTART fields of nobj take their values from oobj; the paths of
 * those that differed are added to *changed. */
void schema_keep_restart(const struct schema *s, void *nobj, const void *oobj,
                         const char *path, struct rl_errors *changed);

/* "500ms", "10s", "1m", "1h"; "64k", "1m", "512b", "100". */
int schema_parse_duration_ms(const char *s, int64_t *out) RL_WUR;
int schema_parse_size(const char *s, int64_t *out) RL_WUR;

#endif
