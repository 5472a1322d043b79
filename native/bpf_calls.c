/* The kernel calls a loaded sampler needs, made directly: maps, programs,
 * perf events and the ring buffer's consumer. With the compiled object kept
 * (bpf_object.py), a run then never loads BCC's library, whose LLVM and
 * clang cost about 100 MiB of memory for as long as the run lasts. Each
 * returns what the kernel gave, or -errno. */
#include "jitprof_native.h"

#include <errno.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int bpf_call(int command, union bpf_attr *attributes) {
    long result = syscall(__NR_bpf, command, attributes, sizeof(*attributes));
    return result < 0 ? -errno : (int)result;
}

static void copy_name(char *destination, const char *name) {
    /* BPF_OBJ_NAME_LEN with its terminator; the kernel takes [A-Za-z0-9_.] */
    size_t length = 0;
    while (name != NULL && name[length] != '\0' && length < BPF_OBJ_NAME_LEN - 1) {
        char character = name[length];
        int allowed = (character >= 'a' && character <= 'z') || (character >= 'A' && character <= 'Z') ||
                      (character >= '0' && character <= '9') || character == '_' || character == '.';
        destination[length] = allowed ? character : '_';
        length++;
    }
    destination[length] = '\0';
}

int jp_bpf_map_create(uint32_t map_type, const char *name, uint32_t key_size, uint32_t value_size, uint32_t max_entries,
                      uint32_t flags) {
    union bpf_attr attributes;
    memset(&attributes, 0, sizeof(attributes));
    attributes.map_type = map_type;
    attributes.key_size = key_size;
    attributes.value_size = value_size;
    attributes.max_entries = max_entries;
    attributes.map_flags = flags;
    copy_name(attributes.map_name, name);
    int result = bpf_call(BPF_MAP_CREATE, &attributes);
    if (result == -EINVAL && name != NULL && name[0] != '\0') { /* a kernel without map names */
        memset(attributes.map_name, 0, sizeof(attributes.map_name));
        result = bpf_call(BPF_MAP_CREATE, &attributes);
    }
    return result;
}

int jp_bpf_prog_load(uint32_t program_type, const char *name, const void *instructions, uint64_t instruction_bytes,
                     const char *license, uint32_t kernel_version, uint32_t log_level, char *log, uint32_t log_size) {
    if (instruction_bytes % sizeof(struct bpf_insn) != 0 || instruction_bytes / sizeof(struct bpf_insn) > UINT32_MAX)
        return -EINVAL;
    union bpf_attr attributes;
    memset(&attributes, 0, sizeof(attributes));
    attributes.prog_type = program_type;
    attributes.insns = (uint64_t)(uintptr_t)instructions;
    attributes.insn_cnt = (uint32_t)(instruction_bytes / sizeof(struct bpf_insn));
    attributes.license = (uint64_t)(uintptr_t)license;
    attributes.kern_version = kernel_version;
    if (log != NULL && log_size > 0) {
        log[0] = '\0';
        attributes.log_level = log_level;
        attributes.log_buf = (uint64_t)(uintptr_t)log;
        attributes.log_size = log_size;
    }
    copy_name(attributes.prog_name, name);
    return bpf_call(BPF_PROG_LOAD, &attributes);
}

/* A raw tracepoint (the kernel's own arguments, no perf buffer between):
 * the link's descriptor, or -errno. */
int jp_bpf_raw_tracepoint_open(const char *name, int program_fd) {
    union bpf_attr attributes;
    memset(&attributes, 0, sizeof(attributes));
    attributes.raw_tracepoint.name = (uint64_t)(uintptr_t)name;
    attributes.raw_tracepoint.prog_fd = (uint32_t)program_fd;
    return bpf_call(BPF_RAW_TRACEPOINT_OPEN, &attributes);
}

static int element_call(int command, int map_fd, const void *key, void *value, uint64_t flags) {
    union bpf_attr attributes;
    memset(&attributes, 0, sizeof(attributes));
    attributes.map_fd = (uint32_t)map_fd;
    attributes.key = (uint64_t)(uintptr_t)key;
    attributes.value = (uint64_t)(uintptr_t)value; /* the next key, for BPF_MAP_GET_NEXT_KEY */
    attributes.flags = flags;
    return bpf_call(command, &attributes);
}

int jp_bpf_map_lookup(int map_fd, const void *key, void *value) {
    return element_call(BPF_MAP_LOOKUP_ELEM, map_fd, key, value, 0);
}

int jp_bpf_map_update(int map_fd, const void *key, const void *value, uint64_t flags) {
    return element_call(BPF_MAP_UPDATE_ELEM, map_fd, key, (void *)value, flags);
}

int jp_bpf_map_delete(int map_fd, const void *key) {
    return element_call(BPF_MAP_DELETE_ELEM, map_fd, key, NULL, 0);
}

int jp_bpf_map_next_key(int map_fd, const void *key, void *next_key) {
    return element_call(BPF_MAP_GET_NEXT_KEY, map_fd, key, next_key, 0);
}

/* The perf event, with the program attached and enabled: its descriptor, or -errno. */
static int open_with_program(struct perf_event_attr *attributes, int pid, int cpu, int program_fd) {
    long opened = syscall(__NR_perf_event_open, attributes, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
    if (opened < 0) return -errno;
    int event_fd = (int)opened;
    if (ioctl(event_fd, PERF_EVENT_IOC_SET_BPF, program_fd) != 0 || ioctl(event_fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
        int error = -errno;
        close(event_fd);
        return error;
    }
    return event_fd;
}

int jp_perf_event_attach(int program_fd, uint32_t event_type, uint64_t config, uint64_t sample_period, uint64_t sample_freq,
                         int pid, int cpu) {
    struct perf_event_attr attributes;
    memset(&attributes, 0, sizeof(attributes));
    attributes.size = sizeof(attributes);
    attributes.type = event_type;
    attributes.config = config;
    if (sample_freq != 0) {
        attributes.freq = 1;
        attributes.sample_freq = sample_freq;
    } else {
        attributes.sample_period = sample_period;
    }
    attributes.wakeup_events = 1;
    return open_with_program(&attributes, pid, cpu, program_fd);
}

/* A uprobe at offset in the file at path (config 0: at entry; the retprobe
 * bit would make it a uretprobe), for the process pid only (every thread sharing its memory),
 * running the program: its descriptor, or -errno. pmu_type is the uprobe
 * PMU's (/sys/bus/event_source/devices/uprobe/type). */
int jp_perf_event_attach_uprobe(int program_fd, uint32_t pmu_type, uint64_t config, const char *path, uint64_t offset, int pid) {
    struct perf_event_attr attributes;
    memset(&attributes, 0, sizeof(attributes));
    attributes.size = sizeof(attributes);
    attributes.type = pmu_type;
    attributes.config = config;
    attributes.config1 = (uint64_t)(uintptr_t)path; /* uprobe_path */
    attributes.config2 = offset;                    /* probe_offset */
    attributes.sample_period = 1;
    attributes.wakeup_events = 1;
    return open_with_program(&attributes, pid, -1, program_fd);
}

/* The ring buffer's consumer (the layout of kernel/bpf/ringbuf.c): a
 * consumer page we write, then the producer page and the data area, mapped
 * twice in a row so a record that wraps reads as one. */
struct jp_ring {
    int epoll_fd;
    uint64_t size; /* of the data area: a power of two */
    size_t page_size;
    uint64_t *consumer_position;
    uint64_t *producer_position;
    const uint8_t *data;
};

void jp_ring_close(struct jp_ring *ring) {
    if (ring == NULL) return;
    if (ring->consumer_position != NULL) munmap(ring->consumer_position, ring->page_size);
    if (ring->producer_position != NULL) munmap(ring->producer_position, ring->page_size + 2 * ring->size);
    if (ring->epoll_fd >= 0) close(ring->epoll_fd);
    free(ring);
}

int jp_ring_open(int map_fd, uint64_t data_size, struct jp_ring **ring_out) {
    *ring_out = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || data_size == 0 || (data_size & (data_size - 1)) != 0 || data_size % (uint64_t)page != 0 ||
        data_size > (1ULL << 32))
        return -EINVAL;
    struct jp_ring *ring = calloc(1, sizeof(*ring));
    if (ring == NULL) return -ENOMEM;
    ring->epoll_fd = -1;
    ring->size = data_size;
    ring->page_size = (size_t)page;
    void *consumer = mmap(NULL, ring->page_size, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
    if (consumer == MAP_FAILED) goto failed;
    ring->consumer_position = consumer;
    void *producer = mmap(NULL, ring->page_size + 2 * data_size, PROT_READ, MAP_SHARED, map_fd, (off_t)ring->page_size);
    if (producer == MAP_FAILED) goto failed;
    ring->producer_position = producer;
    ring->data = (const uint8_t *)producer + ring->page_size;
    ring->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (ring->epoll_fd < 0) goto failed;
    struct epoll_event event = {.events = EPOLLIN};
    if (epoll_ctl(ring->epoll_fd, EPOLL_CTL_ADD, map_fd, &event) != 0) goto failed;
    *ring_out = ring;
    return 0;
failed:;
    int error = -errno;
    jp_ring_close(ring);
    return error;
}

/* Records into the batch until the ring is empty or the batch says stop;
 * returns the records taken, or -EIO for a ring that makes no sense. */
int jp_ring_consume(struct jp_ring *ring, struct jp_ring_batch *batch) {
    uint64_t consumer = __atomic_load_n(ring->consumer_position, __ATOMIC_ACQUIRE);
    int taken = 0;
    for (;;) {
        uint64_t producer = __atomic_load_n(ring->producer_position, __ATOMIC_ACQUIRE);
        if (consumer >= producer) return taken;
        if (producer - consumer > ring->size) return -EIO;
        while (consumer < producer) {
            const uint32_t *header = (const uint32_t *)(ring->data + (consumer & (ring->size - 1)));
            uint32_t length = __atomic_load_n(header, __ATOMIC_ACQUIRE);
            if (length & BPF_RINGBUF_BUSY_BIT) return taken; /* still being written */
            uint32_t size = length & ~(uint32_t)(BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT);
            uint64_t step = ((uint64_t)size + BPF_RINGBUF_HDR_SZ + 7) & ~(uint64_t)7;
            if (step > producer - consumer) return -EIO;
            consumer += step;
            int stop = 0;
            if (!(length & BPF_RINGBUF_DISCARD_BIT)) {
                stop = jp_ring_collect(batch, (const uint8_t *)header + BPF_RINGBUF_HDR_SZ, size) < 0;
                taken++;
            }
            __atomic_store_n(ring->consumer_position, consumer, __ATOMIC_RELEASE);
            if (stop) return taken;
        }
    }
}

/* Another descriptor whose readiness ends the ring's poll (a perf event's
 * ring of mapping records): once, until it is watched again. */
int jp_ring_watch(struct jp_ring *ring, int fd) {
    struct epoll_event event = {.events = EPOLLIN | EPOLLONESHOT};
    event.data.fd = fd;
    if (epoll_ctl(ring->epoll_fd, EPOLL_CTL_MOD, fd, &event) == 0) return 0;
    if (errno != ENOENT) return -errno;
    if (epoll_ctl(ring->epoll_fd, EPOLL_CTL_ADD, fd, &event) == 0) return 0;
    return -errno;
}

int jp_ring_poll(struct jp_ring *ring, int timeout_ms, struct jp_ring_batch *batch) {
    struct epoll_event event;
    if (epoll_wait(ring->epoll_fd, &event, 1, timeout_ms) < 0 && errno != EINTR) return -errno;
    return jp_ring_consume(ring, batch);
}
