/*
 * rl.h — the conventions every module shares.
 *
 * One return convention: functions that can fail return RL_OK or RL_ERR.
 * When a person will read the reason, it travels out through a `char **cause`
 * argument that the caller frees (tmux style).
 */
#ifndef RL_H
#define RL_H

#include <stddef.h>
#include <stdint.h>

#define RL_OK 0
#define RL_ERR (-1)

#define RL_WUR __attribute__((warn_unused_result))
#define RL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define RL_NORETURN __attribute__((noreturn))

#define RL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Limits of the public API (API.md). */
#define RL_KEY_MAX 512          /* bytes of a caller identity */
#define RL_COST_MAX 1000000     /* largest cost a check may ask for */
#define RL_LIMITS_MAX 8         /* limits per policy, decided in one script call */
#define RL_NAME_MAX 64          /* policy names become part of Redis keys */
/* A typed identity ("k:" + key) and its escaped form inside a hash tag. */
#define RL_IDENTITY_MAX (8 + RL_KEY_MAX)
#define RL_REDIS_KEY_MAX (4 + RL_NAME_MAX * 2 + 3 * RL_IDENTITY_MAX)
/* A limit's key: the tag, ":<algorithm tag>:<window ms>". */
#define RL_LIMIT_KEY_MAX (RL_REDIS_KEY_MAX + 32)

#endif
