/*
 * netaddr.h — addresses as text: listen addresses, client addresses and
 * CIDR ranges.  Client addresses are normalised (RFC 5952 IPv6 text,
 * IPv4-mapped IPv6 shown as IPv4) so that one caller is one key.
 */
#ifndef RL_NETADDR_H
#define RL_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "rl.h"

struct rl_cidr {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    int prefix;
};

struct rl_cidr_list {
    struct rl_cidr *v;
    size_t n;
};

struct rl_listen_addr {
    int family; /* AF_INET, AF_INET6 or AF_UNIX */
    struct sockaddr_storage ss;
    socklen_t len;
    char *path; /* AF_UNIX only */
};

/* "127.0.0.1:8080", "0.0.0.0:8080", "[::1]:8080", "unix:/path.sock". */
int listen_addr_parse(const char *s, struct rl_listen_addr *out, char **cause) RL_WUR;
void listen_addr_clear(struct rl_listen_addr *a);

/* "10.0.0.0/8", "::1/128", or a bare address (full prefix). */
int cidr_parse(const char *s, struct rl_cidr *out) RL_WUR;
bool cidr_list_contains(const struct rl_cidr_list *l, int family, const uint8_t *addr);

/*
 * Parse a textual IP address (IPv4, IPv6, bracketed IPv6, with an optional
 * port on IPv4 or bracketed IPv6) into family + 16 bytes; IPv4-mapped IPv6
 * becomes IPv4.  RL_ERR when it is not an address.
 */
int ip_parse(const char *s, size_t len, int *family, uint8_t addr[16]) RL_WUR;
/* Canonical text of an address into buf (INET6_ADDRSTRLEN bytes). */
void ip_format(int family, const uint8_t *addr, char *buf, size_t size);
/* The address's network of `prefix` bits as text: "2001:db8:1:2::/64";
 * the plain address when prefix is 0 or the whole address (64 bytes of
 * buf are enough). */
void ip_format_net(int family, const uint8_t *addr, int prefix, char *buf, size_t size);
/* Cut c to at most v4 (IPv4) or v6 (IPv6) bits, host bits cleared (0: as
 * it is): a range a caller's network, cut the same way, falls in. */
void cidr_fold(struct rl_cidr *c, int v4, int v6);

#endif
