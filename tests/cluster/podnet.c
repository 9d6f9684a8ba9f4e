/* The pod network of the cluster in a box: an LD_PRELOAD shim that gives one process its
 * own IPv4 loopback address (PREHEAT_BOX_POD_IP, any of 127.0.0.0/8), as a pod's network
 * namespace would. bind() to the wildcard (0.0.0.0 or ::, what a container binds to listen
 * "on the pod IP") or to 127.0.0.1 binds the pod's address instead; connect() to
 * 127.0.0.1 ("localhost" inside the pod) reaches the pod's address. Everything else is
 * untouched. An IPv6 socket gets the IPv4-mapped form (gRPC binds a dual-stack [::]).
 * Built by box_kubelet.build_podnet() with the system's cc. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static struct in_addr pod_ip;
static int have_ip = -1;

static int load_ip(void) {
    if (have_ip < 0) {
        const char *text = getenv("PREHEAT_BOX_POD_IP");
        have_ip = text != NULL && inet_pton(AF_INET, text, &pod_ip) == 1;
    }
    return have_ip;
}

static int is_local_or_any4(const struct in_addr *a, int any_too) {
    uint32_t h = ntohl(a->s_addr);
    return h == INADDR_LOOPBACK || (any_too && h == INADDR_ANY);
}

static int rewrite(const struct sockaddr *addr, socklen_t len, struct sockaddr_storage *out,
                   int any_too) {
    if (!load_ip() || addr == NULL) return 0;
    if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in *in = (struct sockaddr_in *)out;
        memcpy(in, addr, sizeof(*in));
        if (!is_local_or_any4(&in->sin_addr, any_too)) return 0;
        in->sin_addr = pod_ip;
        return 1;
    }
    if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
        memcpy(in6, addr, sizeof(*in6));
        int any6 = IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
        int lo6 = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
        int mapped = IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr);
        struct in_addr v4;
        if (mapped) memcpy(&v4, &in6->sin6_addr.s6_addr[12], 4);
        if (!((any_too && any6) || lo6 || (mapped && is_local_or_any4(&v4, any_too)))) return 0;
        memset(&in6->sin6_addr, 0, sizeof(in6->sin6_addr));
        in6->sin6_addr.s6_addr[10] = 0xff;
        in6->sin6_addr.s6_addr[11] = 0xff;
        memcpy(&in6->sin6_addr.s6_addr[12], &pod_ip, 4);
        return 1;
    }
    return 0;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = dlsym(RTLD_NEXT, "bind");
    struct sockaddr_storage out;
    if (rewrite(addr, len, &out, 1)) {
        if (addr->sa_family == AF_INET6) {
            int off = 0; /* the mapped address needs a dual-stack socket */
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
        }
        return real(fd, (struct sockaddr *)&out, len);
    }
    return real(fd, addr, len);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = dlsym(RTLD_NEXT, "connect");
    struct sockaddr_storage out;
    if (rewrite(addr, len, &out, 0)) return real(fd, (struct sockaddr *)&out, len);
    return real(fd, addr, len);
}
