/*
 * admin_view.h — what the admin listener shows (docs/API.md "Admin API"):
 * GET /admin/top (the heaviest callers of a policy, top.h), GET
 * /admin/status (the daemon, its backend, its policies and their counts)
 * and GET /admin/ui, the status page that reads them (src/admin_ui.html,
 * embedded at build time), under admin.c's auth (the page itself is served
 * without a token: its data calls carry it).
 */
#ifndef RL_ADMIN_VIEW_H
#define RL_ADMIN_VIEW_H

#include <stdbool.h>

#include "http.h"

struct rl_worker;

/* Whether r's path is one of these routes: then r is answered.
 * authorized: whether r carries the admin token (admin.c: any request
 * when none is set). */
bool admin_view_handle(struct http_req *r, struct rl_worker *w, bool authorized);

/* The bytes of src/admin_ui.html (admin_ui_html.c, generated). */
extern const char admin_ui_html[];
extern const unsigned long admin_ui_html_len;

#endif
