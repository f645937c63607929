/* A stand-in for libgupnp-igd-1.0.so.4 (UPnP port mapping), for the WHIP client test only.
 *
 * Debian 12's simple-whip-client links libsoup 2, while libnice 0.1.21 links gupnp-igd, which links libsoup 3; the two
 * libsoups refuse to share a process, so whip-client aborts at start ("libsoup2 symbols detected"). Port mapping has
 * no use in a private network namespace, so the test loads this library in its place: libnice gets an object that
 * maps nothing. Built by tests/whip_scenario.py with the system C compiler; no headers needed. */
typedef unsigned long GType;
extern void *g_object_new(GType type, const char *first_property, ...);
#define G_TYPE_OBJECT ((GType)(20 << 2)) /* G_TYPE_MAKE_FUNDAMENTAL (20) */

GType gupnp_simple_igd_get_type(void) { return G_TYPE_OBJECT; }
void *gupnp_simple_igd_thread_new(void) { return g_object_new(G_TYPE_OBJECT, (const char *)0); }
void gupnp_simple_igd_add_port(void *self, const char *protocol, unsigned external_port, const char *local_ip,
                               unsigned local_port, unsigned lease_duration, const char *description) {}
void gupnp_simple_igd_remove_port_local(void *self, const char *protocol, const char *local_ip, unsigned local_port) {}
