/* Reads the sysfs paths NCCL's topology detection reads for an RDMA device, in the
 * same order and with the same parsing (NVIDIA/nccl net_ib.cc and graph/xml.cc, read to
 * learn the paths; nothing copied), and fails on the first one that would leave the NIC
 * out of NCCL's topology or give it no bandwidth. NCCL itself is not installed here.
 *
 * usage: nccl_sysfs DEVICE      (run under `rverbs run`; tests/conformance/nccl_sysfs.sh) */
#define _GNU_SOURCE
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

static int failed;

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			printf("FAIL: " __VA_ARGS__);                                      \
			printf("\n");                                                      \
			failed = 1;                                                        \
		}                                                                          \
	} while (0)

/* The first line of dir/name, without its newline ("" if unreadable). */
static void attr(const char *dir, const char *name, char *out, size_t len)
{
	char p[PATH_MAX];
	FILE *f;

	out[0] = '\0';
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "r");
	if (!f)
		return;
	if (!fgets(out, (int)len, f))
		out[0] = '\0';
	fclose(f);
	out[strcspn(out, "\n")] = '\0';
}

/* "DDDD:BB:DD.F", 12 characters of hex digits and separators. */
static int is_pci_address(const char *s)
{
	if (strlen(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.')
		return 0;
	for (int i = 0; i < 12; i++)
		if (i != 4 && i != 7 && i != 10 && !isxdigit((unsigned char)s[i]))
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	char link[PATH_MAX], bus_path[PATH_MAX], v[256], parent[PATH_MAX];
	char *path, *again, *busid;
	float speed = 0, port_speed = 0;
	long width, port_width;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DEVICE\n", argv[0]);
		return 2;
	}
	/* 1. net_ib: the real path of the device link; function digit set to 0. */
	snprintf(link, sizeof(link), "/sys/class/infiniband/%s/device", argv[1]);
	path = realpath(link, NULL);
	if (!path) {
		printf("FAIL: realpath(%s): no such path\n", link);
		return 1;
	}
	path[strlen(path) - 1] = '0';
	busid = strrchr(path, '/') + 1;
	printf("device %s -> %s\n", link, path);
	CHECK(is_pci_address(busid), "%s is not a PCI address DDDD:BB:DD.F", busid);

	/* 2. xml.cc: the same function through /sys/class/pci_bus/DDDD:BB/../../<busid>. */
	snprintf(bus_path, sizeof(bus_path), "/sys/class/pci_bus/%.7s/../../%s", busid, busid);
	again = realpath(bus_path, NULL);
	CHECK(again && !strcmp(again, path), "%s resolves to %s, not %s", bus_path, again ? again : "nothing", path);
	free(again);

	/* 3. The attributes. */
	attr(path, "class", v, sizeof(v));
	printf("class %s\n", v);
	CHECK(!strncmp(v, "0x02", 4), "class '%s' is not a network controller (0x02...)", v);
	const char *ids[] = {"vendor", "device", "subsystem_vendor", "subsystem_device"};
	for (int i = 0; i < 4; i++) {
		attr(path, ids[i], v, sizeof(v));
		printf("%s %s\n", ids[i], v);
		CHECK(!strncmp(v, "0x", 2) && strlen(v) == 6, "%s '%s' is not a 16-bit hex id", ids[i], v);
	}
	attr(path, "max_link_speed", v, sizeof(v));
	sscanf(v, "%f GT/s", &speed);
	attr(path, "../max_link_speed", v, sizeof(v));
	sscanf(v, "%f GT/s", &port_speed);
	attr(path, "max_link_width", v, sizeof(v));
	width = strtol(v, NULL, 0);
	attr(path, "../max_link_width", v, sizeof(v));
	port_width = strtol(v, NULL, 0);
	printf("link %.1f GT/s x%ld (port above: %.1f GT/s x%ld)\n", speed, width, port_speed, port_width);
	CHECK(speed > 0 && port_speed > 0, "no link speed (device %.1f, port %.1f)", speed, port_speed);
	CHECK(width > 0 && port_width > 0, "no link width (device %ld, port %ld): NCCL takes the smaller, 0", width, port_width);
	attr(path, "numa_node", v, sizeof(v));
	printf("numa_node %s\n", v);
	CHECK(v[0] != '\0', "no numa_node");

	/* 4. Up the tree to the first directory that is not a PCI address: the CPU. */
	snprintf(parent, sizeof(parent), "%s", path);
	for (;;) {
		char *slash = strrchr(parent, '/');
		CHECK(slash && slash != parent, "no root complex above %s", path);
		if (!slash || slash == parent)
			break;
		*slash = '\0';
		char *name = strrchr(parent, '/') + 1;
		if (!is_pci_address(name)) {
			printf("root complex %s: cpu of numa node %s\n", parent, v);
			CHECK(!strncmp(name, "pci", 3), "the directory above the functions, %s, is not a root complex", name);
			break;
		}
	}
	if (strcmp(v, "-1")) {
		char node[PATH_MAX], map[256];
		snprintf(node, sizeof(node), "/sys/devices/system/node/node%s", v);
		attr(node, "cpumap", map, sizeof(map));
		printf("%s/cpumap %s\n", node, map);
		CHECK(map[0] != '\0', "numa_node %s has no %s/cpumap", v, node);
	}

	/* pyverbs' path still works: device/net/ lists the interfaces. */
	snprintf(link, sizeof(link), "%s/net", path);
	DIR *d = opendir(link);
	int nets = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		if (e->d_name[0] != '.') {
			printf("net %s\n", e->d_name);
			nets++;
		}
	if (d)
		closedir(d);
	CHECK(nets > 0, "%s lists no network interface", link);
	free(path);
	printf(failed ? "nccl_sysfs: FAILED\n" : "nccl_sysfs: ok\n");
	return failed;
}
