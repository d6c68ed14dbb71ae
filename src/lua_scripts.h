/* lua_scripts.h — scripts embedded at build time from scripts/lua/ (*.lua). */
#ifndef RL_LUA_SCRIPTS_H
#define RL_LUA_SCRIPTS_H

#include <stddef.h>

/* The check script: every algorithm, all limits of a policy in one call. */
extern const char rl_lua_check[];
extern const char rl_lua_check_sha[];
extern const size_t rl_lua_check_len;
/* The same as a function library (FUNCTION LOAD), and the name of both the
 * library and its one function (FCALL): "ratelimitd_<sha>". */
extern const char rl_lua_check_lib[];
extern const size_t rl_lua_check_lib_len;
extern const char rl_lua_check_fn[];

#endif
