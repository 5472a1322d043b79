/* HotSpot's prologue and epilogue decoders (bpf/hotspot_code.h, the BPF
 * walker's own), for user space: samples taken before the kernel stepped a
 * JVM's code, and the tests that hold the decoders to HotSpot's real code. */
#include <string.h>

#include "jitprof_native.h"

#define HOTSPOT_CODE_INLINE inline
#include "hotspot_code.h"

static int code_of(const uint8_t *bytes, uint64_t length, struct code_bytes *code) {
    if (bytes == NULL || length < HOTSPOT_CODE_BYTES) return -1;
    memcpy(code->words, bytes, HOTSPOT_CODE_BYTES);
    return 0;
}

int jp_hotspot_prologue(const uint8_t *bytes, uint64_t length) {
    struct code_bytes code;
    return code_of(bytes, length, &code) == 0 ? hotspot_prologue_of(&code) : -1;
}

int jp_hotspot_epilogue(const uint8_t *bytes, uint64_t length) {
    struct code_bytes code;
    return code_of(bytes, length, &code) == 0 ? hotspot_epilogue_of(&code) : -1;
}
