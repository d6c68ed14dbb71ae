/*
 * fuzz_rls_rules.c — libFuzzer target: a rule file of rls.config as
 * rls_rules_load reads it (the input is written to a file under /dev/shm,
 * then loaded), then the matcher over the rules it loaded.
 *
 * Oracles besides ASan/UBSan: a refused file carries at least one problem,
 * each a non-empty message naming the file; a loaded one carries none; every
 * rule that answers, reached through literal values only, is what the
 * matcher finds for its own path; a few fixed descriptors and every rule's
 * path with other values match without fault.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rls_rules.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DEPTH RLS_DEPTH_MAX

static char path[64];

static void
remove_file(void)
{
    unlink(path);
}

static uint64_t
new_uid(void)
{
    static uint64_t n;
    return ++n;
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(path, sizeof(path), "/dev/shm/rl-fuzz-rls-%d.yaml", (int)getpid());
    atexit(remove_file);
    return 0;
}

/* Match r's own path (e[0..depth) filled by the walk): with its literal
 * values, and with other values ("", "x"). */
static void
walk(const struct rls_domain *d, const struct rls_node *n, struct rls_entry *e, size_t depth,
     int literal)
{
    static const struct rls_str other[] = {{"", 0}, {"x", 1}, {"\0*", 2}};
    const struct rls_str *shared[DEPTH + 1];

    for (size_t i = 0; i < n->nrules && depth < DEPTH; i++) {
        const struct rls_rule *r = &n->rules[i];
        int lit = literal && r->value.p != NULL && r->parts == NULL;

        e[depth].key = r->key;
        e[depth].value = r->value.p != NULL ? r->value : other[1];
        {
            const struct rls_rule *m = rls_rules_match(d, e, depth + 1, shared);
            if (lit && r->has_limit && m != r)
                abort();
            if (m != NULL && !m->has_limit)
                abort();
        }
        for (size_t k = 0; k < sizeof(other) / sizeof(other[0]); k++) {
            e[depth].value = other[k];
            (void)rls_rules_match(d, e, depth + 1, shared);
        }
        e[depth].value = r->value.p != NULL ? r->value : other[1];
        if (r->node != NULL) /* nested descriptors, if any */
            walk(d, r->node, e, depth + 1, lit);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct rl_errors errs = {0};
    struct rls_rules *r = NULL;
    struct rls_entry e[DEPTH + 1];
    FILE *f = fopen(path, "wb");

    if (f == NULL || fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    if (rls_rules_load(path, new_uid, &r, &errs) != RL_OK) {
        if (r != NULL || errs.n == 0)
            abort();
        for (size_t i = 0; i < errs.n; i++)
            if (errs.msg[i] == NULL || strncmp(errs.msg[i], path, strlen(path)) != 0)
                abort();
        errors_free(&errs);
        return 0;
    }
    if (errs.n != 0 || r == NULL || r->ndomains != 1)
        abort();
    walk(&r->domains[0], &r->domains[0].node, e, 0, 1);
    rls_rules_free(r);
    return 0;
}
