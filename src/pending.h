/*
 * pending.h — backend operations that must apply exactly once: a worker's
 * charges (POST /charge), and any later operation of the same kind (a
 * settle), sent through here rather than to the backend directly.
 *
 * An operation is copied in (its keys, its policy's limits: the caller's
 * request may go at once) and sent with RL_CHECK_ONCE under this queue's
 * writer and the next seq, and RL_CHECK_SETTLE (answered by its reply,
 * however late).  Its caller hears within redis.timeout: the backend's
 * answer when it came by then, or "kept" (NULL), and the operation stays
 * here until the backend has answered it OK.  One that failed, or that was
 * never sent (older ones kept), is sent again in the order operations came,
 * every PENDING_RETRY_MS, and at once after one is applied; the script's once
 * key makes a resend of one that ran (its reply lost with its connection)
 * only read.  A writer's seqs
 * for one key only grow in the order they are applied because nothing
 * newer is sent while an older one waits to be sent again.
 *
 * Bounded: at most the config's max_pending_charges operations kept (sent
 * or waiting), past it pending_submit refuses.  One queue per worker, on its
 * event loop; Redis backends only (the memory backend answers at once).
 * docs/API.md, "Charges the backend cannot take now".
 */
#ifndef RL_PENDING_H
#define RL_PENDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "rl.h"

struct event_base;
struct rl_config;
struct rl_metrics;
struct rl_pending;

/* How often kept operations are sent again while some fail. */
#define PENDING_RETRY_MS 100
/* WRONGTYPE replies in a row (a key of the charge holds another type: no
 * wait mends it) after which an operation is given up (lost). */
#define PENDING_ERRORS_MAX 100

/*
 * Called exactly once per submitted operation: with the backend's answer
 * (status OK: applied) when it came within the deadline, or with NULL when
 * it did not: kept, and applied later (or, at exit or after
 * PENDING_ERRORS_MAX error replies, lost: logged and counted).  May run
 * before pending_submit returns.  `res` lives only during the call.
 */
typedef void (*rl_pending_cb)(const struct rl_check_res *res, void *arg);

struct rl_pending *pending_new(struct event_base *base, struct rl_backend *be,
                               struct rl_metrics *m);

/*
 * Submit `req` (a charge: RL_CHECK_CHARGE, no other flag; or a settle:
 * RL_CHECK_RSV_SETTLE, no other flag, sent without RL_CHECK_ONCE since it
 * deletes the record it reads; its policy, keys and claim copied) under cfg (a reference is kept while it is).  Its caller is
 * answered by cb within cfg's redis.timeout.  `units` and `metrics_id` say
 * what ratelimitd_charged_units_total counts when it is applied (a
 * settle: its positive difference, and ratelimitd_reservations_total).  RL_ERR:
 * the queue holds max_pending_charges already; nothing kept, cb not called.
 */
int pending_submit(struct rl_pending *p, struct rl_config *cfg, const struct rl_check_req *req,
                   int metrics_id, rl_pending_cb cb, void *arg) RL_WUR;

/* Operations kept (sent or waiting), and their units. */
size_t pending_count(const struct rl_pending *p);
int64_t pending_units(const struct rl_pending *p);

/* Whether nothing is kept (true for NULL). */
bool pending_idle(const struct rl_pending *p);

/* Draining: send what is kept now; `idle(arg)` is called whenever the queue
 * becomes idle after that. */
void pending_drain(struct rl_pending *p, void (*idle)(void *arg), void *arg);

/* Send nothing more (before the backend is destroyed: its callbacks then
 * hand operations back, which stay kept). */
void pending_close(struct rl_pending *p);

/* Free the queue; what is still kept is logged (charges and units) and
 * counted as lost.  After the backend is destroyed (no callback owed). */
void pending_free(struct rl_pending *p);

#endif
