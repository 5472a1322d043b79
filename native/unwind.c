/* .eh_frame / .debug_frame of an x86-64 ELF file -> the unwind rows that
 * bpf/sampler.bpf.c reads (profiler/native/unwind_rows.py has the format).
 *
 * The file is hostile input: every length, offset and pointer read from it
 * is checked against the bytes it lies in before it is used. A malformed FDE
 * is skipped (and counted); a malformed header stops the walk of the section.
 */
#include "jitprof_native.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE_BYTES (4ULL << 30)
#define MAX_ROW_PC 0xFFFFFFFFULL
#define REG_RBX 3
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16
#define TRACKED_REGS 256 /* registers whose presence is tracked (x86-64 uses < 130) */
#define STATE_STACK 64   /* DW_CFA_remember_state depth */

/* DWARF call frame instructions (DWARF 5, 6.4.2; GNU extensions). The
 * high two bits of the first three carry the opcode, the low six an operand. */
enum {
    DW_CFA_advance_loc = 0x40,
    DW_CFA_offset = 0x80,
    DW_CFA_restore = 0xc0,
    DW_CFA_nop = 0x00,
    DW_CFA_set_loc = 0x01,
    DW_CFA_advance_loc1 = 0x02,
    DW_CFA_advance_loc2 = 0x03,
    DW_CFA_advance_loc4 = 0x04,
    DW_CFA_offset_extended = 0x05,
    DW_CFA_restore_extended = 0x06,
    DW_CFA_undefined = 0x07,
    DW_CFA_same_value = 0x08,
    DW_CFA_register = 0x09,
    DW_CFA_remember_state = 0x0a,
    DW_CFA_restore_state = 0x0b,
    DW_CFA_def_cfa = 0x0c,
    DW_CFA_def_cfa_register = 0x0d,
    DW_CFA_def_cfa_offset = 0x0e,
    DW_CFA_def_cfa_expression = 0x0f,
    DW_CFA_expression = 0x10,
    DW_CFA_offset_extended_sf = 0x11,
    DW_CFA_def_cfa_sf = 0x12,
    DW_CFA_def_cfa_offset_sf = 0x13,
    DW_CFA_val_offset = 0x14,
    DW_CFA_val_offset_sf = 0x15,
    DW_CFA_val_expression = 0x16,
    DW_CFA_GNU_args_size = 0x2e,
    DW_CFA_GNU_negative_offset_extended = 0x2f,
};

/* Pointer encodings of .eh_frame (LSB 5.0, DWARF Extensions): the low
 * nibble is the value's format, the next three bits how it applies. */
enum {
    DW_EH_PE_FORMAT_MASK = 0x0f,
    DW_EH_PE_APPLICATION_MASK = 0x70,
    DW_EH_PE_absptr = 0x00,
    DW_EH_PE_uleb128 = 0x01,
    DW_EH_PE_udata2 = 0x02,
    DW_EH_PE_udata4 = 0x03,
    DW_EH_PE_udata8 = 0x04,
    DW_EH_PE_sleb128 = 0x09,
    DW_EH_PE_sdata2 = 0x0a,
    DW_EH_PE_sdata4 = 0x0b,
    DW_EH_PE_sdata8 = 0x0c,
    DW_EH_PE_pcrel = 0x10,
    DW_EH_PE_omit = 0xff,
};

/* Row CFA types and rbp rules: jitprof_abi.h (the kernel reads the rows). */
enum rule_kind {
    RULE_NONE = 0,
    RULE_UNDEFINED,
    RULE_SAME,
    RULE_OFFSET,
    RULE_VAL_OFFSET,
    RULE_REGISTER,
    RULE_EXPRESSION,
    RULE_VAL_EXPRESSION
};
enum cfa_kind { CFA_UNSET = 0, CFA_REGISTER, CFA_EXPRESSION };

struct rule {
    int kind;
    int64_t value;
};

struct state {
    uint64_t pc;
    int cfa_kind;
    int64_t cfa_reg; /* -1: none */
    int64_t cfa_offset;
    const uint8_t *cfa_expr;
    uint64_t cfa_expr_len;
    struct rule rbp, rbx, ra;
    uint64_t present[TRACKED_REGS / 64]; /* registers with any rule */
    int other_rules;                     /* rules for registers >= TRACKED_REGS */
};

struct cursor {
    const uint8_t *at, *end;
    int ok;
};

struct cie {
    int ok;
    uint64_t code_align;
    int64_t data_align;
    uint8_t fde_encoding;
    int has_z;
    const uint8_t *instructions, *instructions_end;
    /* the CIE's last table line, the base of every FDE's table */
    int has_line;
    struct state line;
};

struct placed {
    uint64_t pc;
    uint32_t is_gap;
    uint32_t sequence;
    struct unwind_row row;
};

struct builder {
    struct placed *items;
    size_t count, capacity;
    uint32_t sequence;
    int out_of_memory;
    int want_starts; /* collect every FDE's start (jp_function_starts) */
    uint32_t *starts;
    size_t start_count, start_capacity;
};

static void add_start(struct builder *builder, uint64_t start) {
    if (builder->start_count == builder->start_capacity) {
        size_t capacity = builder->start_capacity ? builder->start_capacity * 2 : 1024;
        uint32_t *grown = realloc(builder->starts, capacity * sizeof *grown);
        if (grown == NULL) {
            builder->out_of_memory = 1;
            return;
        }
        builder->starts = grown;
        builder->start_capacity = capacity;
    }
    builder->starts[builder->start_count++] = (uint32_t)start;
}

/* Reading --------------------------------------------------------------- */

static uint64_t read_unsigned(struct cursor *cursor, unsigned size) {
    if (!cursor->ok || (size_t)(cursor->end - cursor->at) < size) {
        cursor->ok = 0;
        return 0;
    }
    uint64_t value = 0;
    for (unsigned index = 0; index < size; index++) value |= (uint64_t)cursor->at[index] << (8 * index);
    cursor->at += size;
    return value;
}

static int64_t read_signed(struct cursor *cursor, unsigned size) {
    uint64_t value = read_unsigned(cursor, size);
    if (size < 8) {
        uint64_t sign = 1ULL << (8 * size - 1);
        value = (value ^ sign) - sign;
    }
    return (int64_t)value;
}

static uint64_t read_uleb(struct cursor *cursor) {
    uint64_t value = 0;
    unsigned shift = 0;
    while (cursor->ok) {
        if (cursor->at >= cursor->end) {
            cursor->ok = 0;
            break;
        }
        uint8_t byte = *cursor->at++;
        if (shift < 64) value |= (uint64_t)(byte & 0x7f) << shift;
        shift += 7;
        if (!(byte & 0x80)) break;
    }
    return value;
}

static int64_t read_sleb(struct cursor *cursor) {
    uint64_t value = 0;
    unsigned shift = 0;
    uint8_t byte = 0;
    while (cursor->ok) {
        if (cursor->at >= cursor->end) {
            cursor->ok = 0;
            return 0;
        }
        byte = *cursor->at++;
        if (shift < 64) value |= (uint64_t)(byte & 0x7f) << shift;
        shift += 7;
        if (!(byte & 0x80)) break;
    }
    if (shift < 64 && (byte & 0x40)) value |= ~0ULL << shift;
    return (int64_t)value;
}

/* A pointer in .eh_frame's encoding (DW_EH_PE_*); field_address is where the
 * field itself sits, for pc-relative values. Returns 0 on an unknown form. */
static int read_encoded(struct cursor *cursor, uint8_t encoding, uint64_t field_address, int apply_relative, uint64_t *value) {
    int64_t signed_value;
    switch (encoding & DW_EH_PE_FORMAT_MASK) {
    case DW_EH_PE_absptr: *value = read_unsigned(cursor, 8); break;
    case DW_EH_PE_uleb128: *value = read_uleb(cursor); break;
    case DW_EH_PE_udata2: *value = read_unsigned(cursor, 2); break;
    case DW_EH_PE_udata4: *value = read_unsigned(cursor, 4); break;
    case DW_EH_PE_udata8: *value = read_unsigned(cursor, 8); break;
    case DW_EH_PE_sleb128:
        signed_value = read_sleb(cursor);
        *value = (uint64_t)signed_value;
        break;
    case DW_EH_PE_sdata2:
        signed_value = read_signed(cursor, 2);
        *value = (uint64_t)signed_value;
        break;
    case DW_EH_PE_sdata4:
        signed_value = read_signed(cursor, 4);
        *value = (uint64_t)signed_value;
        break;
    case DW_EH_PE_sdata8:
        signed_value = read_signed(cursor, 8);
        *value = (uint64_t)signed_value;
        break;
    default: return 0;
    }
    if (!cursor->ok) return 0;
    if (!apply_relative) return 1;
    switch (encoding & DW_EH_PE_APPLICATION_MASK) {
    case DW_EH_PE_absptr: return 1;
    case DW_EH_PE_pcrel: *value += field_address; return 1;
    default: return 0; /* textrel, datarel, funcrel, aligned: not used for FDE ranges on x86-64 */
    }
}

/* Rows ------------------------------------------------------------------ */

static const uint8_t PLT_PREFIX[] = {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a};
static const uint8_t PLT_SUFFIX[] = {0x2a, 0x33, 0x24, 0x22};
static const uint8_t SIGNAL_CFA[] = {0x77, 0xa0, 0x01, 0x06};

static int fits_i32(int64_t value) {
    return value >= INT32_MIN && value <= INT32_MAX;
}

static struct unwind_row row_for(const struct state *state) {
    struct unwind_row row = {0};
    row.pc = (uint32_t)state->pc;
    if (state->ra.kind == RULE_UNDEFINED) {
        row.cfa_type = CFA_END_OF_STACK;
        return row;
    }
    if (state->cfa_kind == CFA_EXPRESSION) {
        const uint8_t *expr = state->cfa_expr;
        uint64_t length = state->cfa_expr_len;
        if (length == sizeof SIGNAL_CFA && memcmp(expr, SIGNAL_CFA, length) == 0) {
            row.cfa_type = CFA_SIGNAL;
        } else if (length == sizeof PLT_PREFIX + 1 + sizeof PLT_SUFFIX && memcmp(expr, PLT_PREFIX, sizeof PLT_PREFIX) == 0 &&
                   memcmp(expr + sizeof PLT_PREFIX + 1, PLT_SUFFIX, sizeof PLT_SUFFIX) == 0 && expr[sizeof PLT_PREFIX] >= 0x30 &&
                   expr[sizeof PLT_PREFIX] <= 0x4f) {
            row.cfa_type = CFA_PLT;
            row.cfa_offset = expr[sizeof PLT_PREFIX] - 0x30;
        } else {
            row.cfa_type = CFA_UNSUPPORTED;
        }
        return row;
    }
    if (state->cfa_kind == CFA_REGISTER && state->cfa_reg == REG_RSP) {
        row.cfa_type = CFA_RSP;
    } else if (state->cfa_kind == CFA_REGISTER && state->cfa_reg == REG_RBP) {
        row.cfa_type = CFA_RBP;
    } else if (state->cfa_kind == CFA_REGISTER && state->cfa_reg == REG_RBX) {
        row.cfa_type = CFA_RBX;
    } else {
        row.cfa_type = CFA_UNSUPPORTED;
        return row;
    }
    if (state->ra.kind != RULE_OFFSET || state->ra.value != -8 || !fits_i32(state->cfa_offset)) {
        row.cfa_type = CFA_UNSUPPORTED;
        return row;
    }
    row.cfa_offset = (int32_t)state->cfa_offset;
    if (state->rbx.kind == RULE_OFFSET && state->rbx.value >= INT16_MIN && state->rbx.value <= INT16_MAX) {
        row.saved_rules |= RBX_OFFSET;
        row.rbx_offset = (int16_t)state->rbx.value;
    } else if (state->rbx.kind != RULE_NONE && state->rbx.kind != RULE_SAME) {
        row.saved_rules |= RBX_LOST;
    }
    if (state->rbp.kind == RULE_NONE || state->rbp.kind == RULE_SAME || state->rbp.kind == RULE_UNDEFINED) return row;
    if (state->rbp.kind == RULE_OFFSET && fits_i32(state->rbp.value)) {
        row.saved_rules |= RBP_OFFSET;
        row.rbp_offset = (int32_t)state->rbp.value;
        return row;
    }
    row = (struct unwind_row){.pc = row.pc, .cfa_type = CFA_UNSUPPORTED};
    return row;
}

static void place(struct builder *builder, uint64_t pc, int is_gap, struct unwind_row row) {
    if (builder->out_of_memory) return;
    if (builder->count == builder->capacity) {
        size_t capacity = builder->capacity ? builder->capacity * 2 : 4096;
        struct placed *grown = realloc(builder->items, capacity * sizeof *grown);
        if (grown == NULL) {
            builder->out_of_memory = 1;
            return;
        }
        builder->items = grown;
        builder->capacity = capacity;
    }
    struct placed *item = &builder->items[builder->count++];
    item->pc = pc;
    item->is_gap = (uint32_t)is_gap;
    item->sequence = builder->sequence++;
    item->row = row;
}

/* CFA programs ------------------------------------------------------------- */

static void set_present(struct state *state, uint64_t reg, int present) {
    if (reg >= TRACKED_REGS) {
        if (present) state->other_rules = 1;
        return;
    }
    if (present)
        state->present[reg / 64] |= 1ULL << (reg % 64);
    else
        state->present[reg / 64] &= ~(1ULL << (reg % 64));
}

static int has_registers(const struct state *state) {
    for (int index = 0; index < TRACKED_REGS / 64; index++)
        if (state->present[index]) return 1;
    return state->other_rules;
}

static void set_rule(struct state *state, uint64_t reg, int kind, int64_t value) {
    set_present(state, reg, 1);
    if (reg == REG_RBP) state->rbp = (struct rule){kind, value};
    if (reg == REG_RBX) state->rbx = (struct rule){kind, value};
    if (reg == REG_RA) state->ra = (struct rule){kind, value};
}

/* DW_CFA_restore: back to the CIE's rule for the register, or none. */
static void restore_rule(struct state *state, const struct state *cie_line, uint64_t reg) {
    int in_cie = reg < TRACKED_REGS ? (cie_line->present[reg / 64] >> (reg % 64)) & 1 : 0;
    set_present(state, reg, in_cie);
    if (reg == REG_RBP) state->rbp = in_cie ? cie_line->rbp : (struct rule){RULE_NONE, 0};
    if (reg == REG_RBX) state->rbx = in_cie ? cie_line->rbx : (struct rule){RULE_NONE, 0};
    if (reg == REG_RA) state->ra = in_cie ? cie_line->ra : (struct rule){RULE_NONE, 0};
}

struct emit {
    struct builder *builder; /* NULL: a CIE, whose lines are only remembered */
    uint64_t start, end;
    struct state last_line;
    int has_line;
};

static void emit_line(struct emit *emit, const struct state *line) {
    emit->last_line = *line;
    emit->has_line = 1;
    if (emit->builder != NULL && line->pc >= emit->start && line->pc < emit->end)
        place(emit->builder, line->pc, 0, row_for(line));
}

/* Runs one CFA program. Returns 0 if it is malformed: the caller drops every
 * row it emitted. */
static int run_program(const uint8_t *at, const uint8_t *end, struct state *state, const struct cie *cie, struct emit *emit) {
    struct cursor cursor = {at, end, 1};
    struct state *stack = NULL;
    int depth = 0, result = 0;
    while (cursor.ok && cursor.at < cursor.end) {
        uint8_t opcode = *cursor.at++;
        uint8_t low = opcode & 0x3f;
        uint64_t reg, delta;
        int64_t offset;
        switch (opcode >> 6) {
        case DW_CFA_advance_loc >> 6:
            emit_line(emit, state);
            state->pc += low * cie->code_align;
            continue;
        case DW_CFA_offset >> 6:
            offset = (int64_t)read_uleb(&cursor) * cie->data_align;
            set_rule(state, low, RULE_OFFSET, offset);
            continue;
        case DW_CFA_restore >> 6:
            if (!cie->has_line || emit->builder == NULL) goto done;
            restore_rule(state, &cie->line, low);
            continue;
        }
        switch (opcode) {
        case DW_CFA_nop: break;
        case DW_CFA_set_loc:
            delta = read_unsigned(&cursor, 8);
            emit_line(emit, state);
            state->pc = delta;
            break;
        case DW_CFA_advance_loc1:
        case DW_CFA_advance_loc2:
        case DW_CFA_advance_loc4:
            delta = read_unsigned(&cursor, opcode == DW_CFA_advance_loc1 ? 1 : opcode == DW_CFA_advance_loc2 ? 2 : 4);
            emit_line(emit, state);
            state->pc += delta * cie->code_align;
            break;
        case DW_CFA_offset_extended:
            reg = read_uleb(&cursor);
            offset = (int64_t)read_uleb(&cursor) * cie->data_align;
            set_rule(state, reg, RULE_OFFSET, offset);
            break;
        case DW_CFA_restore_extended:
            reg = read_uleb(&cursor);
            if (!cie->has_line || emit->builder == NULL) goto done;
            restore_rule(state, &cie->line, reg);
            break;
        case DW_CFA_undefined: set_rule(state, read_uleb(&cursor), RULE_UNDEFINED, 0); break;
        case DW_CFA_same_value: set_rule(state, read_uleb(&cursor), RULE_SAME, 0); break;
        case DW_CFA_register:
            reg = read_uleb(&cursor);
            set_rule(state, reg, RULE_REGISTER, (int64_t)read_uleb(&cursor));
            break;
        case DW_CFA_remember_state:
            if (depth == STATE_STACK) goto done;
            if (stack == NULL && (stack = malloc(STATE_STACK * sizeof *stack)) == NULL) goto done;
            stack[depth++] = *state;
            break;
        case DW_CFA_restore_state:
            if (depth == 0) goto done;
            delta = state->pc;
            *state = stack[--depth];
            state->pc = delta;
            break;
        case DW_CFA_def_cfa:
            state->cfa_kind = CFA_REGISTER;
            state->cfa_reg = (int64_t)read_uleb(&cursor);
            state->cfa_offset = (int64_t)read_uleb(&cursor);
            break;
        case DW_CFA_def_cfa_register: /* the offset stays */
            state->cfa_reg = (int64_t)read_uleb(&cursor);
            if (state->cfa_kind == CFA_EXPRESSION) state->cfa_offset = 0;
            state->cfa_kind = CFA_REGISTER;
            break;
        case DW_CFA_def_cfa_offset: /* the register stays */
            state->cfa_offset = (int64_t)read_uleb(&cursor);
            if (state->cfa_kind == CFA_EXPRESSION) state->cfa_reg = -1;
            state->cfa_kind = CFA_REGISTER;
            break;
        case DW_CFA_def_cfa_expression:
            delta = read_uleb(&cursor);
            if (!cursor.ok || delta > (uint64_t)(cursor.end - cursor.at)) goto done;
            state->cfa_kind = CFA_EXPRESSION;
            state->cfa_expr = cursor.at;
            state->cfa_expr_len = delta;
            cursor.at += delta;
            break;
        case DW_CFA_expression:
        case DW_CFA_val_expression:
            reg = read_uleb(&cursor);
            delta = read_uleb(&cursor);
            if (!cursor.ok || delta > (uint64_t)(cursor.end - cursor.at)) goto done;
            cursor.at += delta;
            set_rule(state, reg, opcode == DW_CFA_expression ? RULE_EXPRESSION : RULE_VAL_EXPRESSION, 0);
            break;
        case DW_CFA_offset_extended_sf:
            reg = read_uleb(&cursor);
            set_rule(state, reg, RULE_OFFSET, read_sleb(&cursor) * cie->data_align);
            break;
        case DW_CFA_def_cfa_sf:
            state->cfa_kind = CFA_REGISTER;
            state->cfa_reg = (int64_t)read_uleb(&cursor);
            state->cfa_offset = read_sleb(&cursor) * cie->data_align;
            break;
        case DW_CFA_def_cfa_offset_sf:
            state->cfa_offset = read_sleb(&cursor) * cie->data_align;
            if (state->cfa_kind == CFA_EXPRESSION) state->cfa_reg = -1;
            state->cfa_kind = CFA_REGISTER;
            break;
        case DW_CFA_val_offset:
        case DW_CFA_val_offset_sf:
            reg = read_uleb(&cursor);
            offset = opcode == DW_CFA_val_offset ? (int64_t)read_uleb(&cursor) * cie->data_align
                                                 : read_sleb(&cursor) * cie->data_align;
            set_rule(state, reg, RULE_VAL_OFFSET, offset);
            break;
        case DW_CFA_GNU_args_size: /* the CFA does not depend on it */ read_uleb(&cursor); break;
        case DW_CFA_GNU_negative_offset_extended:
            reg = read_uleb(&cursor);
            set_rule(state, reg, RULE_OFFSET, -(int64_t)read_uleb(&cursor) * cie->data_align);
            break;
        default: goto done; /* an opcode we do not know: its operands cannot be skipped */
        }
    }
    if (!cursor.ok) goto done;
    /* The last line counts if it says anything (as in the DWARF table). */
    if ((state->cfa_kind == CFA_REGISTER && state->cfa_reg >= 0) || has_registers(state)) emit_line(emit, state);
    result = 1;
done:
    free(stack);
    return result;
}

/* Entries ------------------------------------------------------------------ */

struct section {
    const uint8_t *data;
    uint64_t size;
    uint64_t address;
    int is_eh_frame;
};

static struct state empty_state(uint64_t pc) {
    struct state state;
    memset(&state, 0, sizeof state);
    state.pc = pc;
    state.cfa_reg = -1;
    return state;
}

static struct cie parse_cie(const struct section *section, uint64_t offset) {
    struct cie cie;
    memset(&cie, 0, sizeof cie);
    if (offset >= section->size || section->size - offset < 4) return cie;
    struct cursor cursor = {section->data + offset, section->data + section->size, 1};
    uint64_t length = read_unsigned(&cursor, 4);
    unsigned id_size = 4;
    if (length == 0xffffffffULL) {
        length = read_unsigned(&cursor, 8);
        id_size = 8;
    }
    if (!cursor.ok || length < id_size || length > (uint64_t)(cursor.end - cursor.at)) return cie;
    const uint8_t *entry_end = cursor.at + length;
    cursor.end = entry_end;
    uint64_t id = read_unsigned(&cursor, id_size);
    uint64_t cie_id = section->is_eh_frame ? 0 : (id_size == 8 ? ~0ULL : 0xffffffffULL);
    if (!cursor.ok || id != cie_id) return cie;
    uint8_t version = (uint8_t)read_unsigned(&cursor, 1);
    const uint8_t *augmentation = cursor.at;
    while (cursor.at < cursor.end && *cursor.at) cursor.at++;
    if (cursor.at >= cursor.end) return cie;
    size_t augmentation_length = (size_t)(cursor.at - augmentation);
    cursor.at++;
    if (augmentation_length && augmentation[0] != 'z') return cie; /* "eh" and the like: not produced for x86-64 */
    if (version >= 4) {
        if (read_unsigned(&cursor, 1) != 8) return cie; /* address size */
        read_unsigned(&cursor, 1);                      /* segment selector size */
    }
    cie.code_align = read_uleb(&cursor);
    cie.data_align = read_sleb(&cursor);
    if (version == 1)
        read_unsigned(&cursor, 1);
    else
        read_uleb(&cursor);
    cie.fde_encoding = section->is_eh_frame ? DW_EH_PE_absptr : DW_EH_PE_omit; /* omit: plain target addresses */
    if (augmentation_length) {
        cie.has_z = 1;
        uint64_t data_length = read_uleb(&cursor);
        if (!cursor.ok || data_length > (uint64_t)(cursor.end - cursor.at)) return cie;
        struct cursor data = {cursor.at, cursor.at + data_length, 1};
        for (size_t index = 1; index < augmentation_length && data.ok; index++) {
            switch (augmentation[index]) {
            case 'R': cie.fde_encoding = (uint8_t)read_unsigned(&data, 1); break;
            case 'L': read_unsigned(&data, 1); break;
            case 'P': {
                uint8_t encoding = (uint8_t)read_unsigned(&data, 1);
                uint64_t ignored;
                if (!read_encoded(&data, encoding, 0, 0, &ignored)) data.ok = 0;
                break;
            }
            case 'S':
            case 'B': break;
            default: index = augmentation_length; break; /* unknown: the rest of the data is skipped by its length */
            }
        }
        cursor.at += data_length;
    }
    if (!cursor.ok) return cie;
    cie.instructions = cursor.at;
    cie.instructions_end = entry_end;
    struct state state = empty_state(0);
    struct emit emit = {NULL, 0, 0, {0}, 0};
    if (!run_program(cie.instructions, cie.instructions_end, &state, &cie, &emit)) return cie;
    cie.has_line = emit.has_line;
    cie.line = emit.last_line;
    cie.ok = 1;
    return cie;
}

/* A small cache of parsed CIEs: a file has a handful, shared by thousands of FDEs. */
#define CIE_SLOTS 64
struct cie_cache {
    uint64_t offsets[CIE_SLOTS];
    struct cie entries[CIE_SLOTS];
    int used[CIE_SLOTS];
};

static const struct cie *find_cie(struct cie_cache *cache, const struct section *section, uint64_t offset) {
    unsigned slot = (unsigned)((offset * 0x9E3779B97F4A7C15ULL) >> 58) % CIE_SLOTS;
    if (!cache->used[slot] || cache->offsets[slot] != offset) {
        cache->entries[slot] = parse_cie(section, offset);
        cache->offsets[slot] = offset;
        cache->used[slot] = 1;
    }
    return cache->entries[slot].ok ? &cache->entries[slot] : NULL;
}

static void walk_section(const struct section *section, struct builder *builder, struct jp_table_stats *stats) {
    struct cie_cache *cache = calloc(1, sizeof *cache);
    if (cache == NULL) {
        builder->out_of_memory = 1;
        return;
    }
    uint64_t offset = 0;
    while (offset < section->size && section->size - offset >= 4) {
        struct cursor cursor = {section->data + offset, section->data + section->size, 1};
        uint64_t length = read_unsigned(&cursor, 4);
        unsigned id_size = 4;
        if (length == 0) { /* a terminator, or padding between merged sections */
            offset += 4;
            continue;
        }
        if (length == 0xffffffffULL) {
            length = read_unsigned(&cursor, 8);
            id_size = 8;
        }
        if (!cursor.ok || length < id_size || length > (uint64_t)(cursor.end - cursor.at)) {
            stats->malformed++;
            break; /* the entry chain itself is broken: nothing after it can be found */
        }
        const uint8_t *entry_end = cursor.at + length;
        uint64_t next = (uint64_t)(entry_end - section->data);
        cursor.end = entry_end;
        const uint8_t *id_field = cursor.at;
        uint64_t id = read_unsigned(&cursor, id_size);
        int is_cie = section->is_eh_frame ? id == 0 : id == (id_size == 8 ? ~0ULL : 0xffffffffULL);
        if (is_cie) {
            offset = next;
            continue;
        }
        stats->fdes++;
        uint64_t cie_offset;
        if (section->is_eh_frame) {
            uint64_t field = (uint64_t)(id_field - section->data);
            if (id > field) {
                stats->malformed++;
                offset = next;
                continue;
            }
            cie_offset = field - id;
        } else {
            cie_offset = id;
        }
        const struct cie *cie = find_cie(cache, section, cie_offset);
        uint64_t start = 0, range = 0;
        int ok = cie != NULL;
        if (ok) {
            if (cie->fde_encoding == DW_EH_PE_omit) {
                start = read_unsigned(&cursor, 8);
                range = read_unsigned(&cursor, 8);
            } else {
                uint64_t field_address = section->address + (uint64_t)(cursor.at - section->data);
                ok = read_encoded(&cursor, cie->fde_encoding, field_address, 1, &start) &&
                     read_encoded(&cursor, cie->fde_encoding, 0, 0, &range);
            }
            if (ok && cie->has_z) {
                uint64_t data_length = read_uleb(&cursor);
                if (!cursor.ok || data_length > (uint64_t)(cursor.end - cursor.at))
                    ok = 0;
                else
                    cursor.at += data_length;
            }
            ok = ok && cursor.ok;
        }
        if (!ok) {
            stats->malformed++;
            offset = next;
            continue;
        }
        uint64_t end = start + range;
        if (end > MAX_ROW_PC || end <= start) {
            offset = next;
            continue;
        }
        if (builder->want_starts) {
            add_start(builder, start);
            offset = next;
            continue; /* the rules are not needed */
        }
        struct state state = cie->has_line ? cie->line : empty_state(start);
        state.pc = start;
        struct emit emit = {builder, start, end, {0}, 0};
        size_t before = builder->count;
        uint32_t sequence_before = builder->sequence;
        if (!run_program(cursor.at, entry_end, &state, cie, &emit)) {
            builder->count = before; /* a malformed program: its rows are dropped, the range stays a gap */
            builder->sequence = sequence_before;
            stats->failed++;
            offset = next;
            continue;
        }
        place(builder, end, 1, (struct unwind_row){.pc = (uint32_t)end, .cfa_type = CFA_GAP});
        offset = next;
    }
    free(cache);
}

/* Sorting and merging ------------------------------------------------------- */

static int compare_placed(const void *left_pointer, const void *right_pointer) {
    const struct placed *left = left_pointer, *right = right_pointer;
    if (left->pc != right->pc) return left->pc < right->pc ? -1 : 1;
    if (left->is_gap != right->is_gap) return left->is_gap < right->is_gap ? -1 : 1;
    return left->sequence < right->sequence ? -1 : left->sequence > right->sequence;
}

static int same_rule(const struct unwind_row *left, const struct unwind_row *right) {
    return left->cfa_type == right->cfa_type && left->cfa_offset == right->cfa_offset &&
           left->saved_rules == right->saved_rules && left->rbp_offset == right->rbp_offset &&
           left->rbx_offset == right->rbx_offset;
}

static size_t finish_rows(struct builder *builder) {
    if (builder->count == 0) return 0;
    qsort(builder->items, builder->count, sizeof *builder->items, compare_placed);
    /* One row per address (a real row wins over a gap), then consecutive
     * repeats merged; done in place, rows packed at the array's front (a
     * row is smaller than a placed item, so no unread item is overwritten). */
    uint8_t *out = (uint8_t *)builder->items;
    struct unwind_row previous = {0};
    size_t written = 0;
    uint64_t last_pc = 0;
    for (size_t index = 0; index < builder->count; index++) {
        struct placed item = builder->items[index];
        if (index > 0 && item.pc == last_pc) continue;
        last_pc = item.pc;
        if (written && same_rule(&previous, &item.row)) continue;
        memcpy(out + written * sizeof item.row, &item.row, sizeof item.row);
        previous = item.row;
        written++;
    }
    return written;
}

/* ELF --------------------------------------------------------------------- */

struct elf64_header {
    uint8_t ident[16];
    uint16_t type, machine;
    uint32_t version;
    uint64_t entry, phoff, shoff;
    uint32_t flags;
    uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx;
};

struct elf64_section {
    uint32_t name, type;
    uint64_t flags, addr, offset, size;
    uint32_t link, info;
    uint64_t addralign, entsize;
};

#define SHT_NOBITS 8
#define MAX_NAMES_BYTES (16u << 20)
#define MAX_CFI_BYTES (1ULL << 30)

/* Where the file's bytes come from: memory (the fuzzer) or a descriptor read
 * with pread, never mapped: a file its owner truncates under us must not
 * become a SIGBUS in the daemon. */
struct source {
    const uint8_t *memory;
    int fd;
    uint64_t size;
};

/* size bytes at offset, checked against the file; memory or a malloc'd copy
 * (*owned set, freed by the caller). */
static const uint8_t *fetch(const struct source *source, uint64_t offset, uint64_t size, uint8_t **owned) {
    *owned = NULL;
    if (offset > source->size || size > source->size - offset) return NULL;
    if (source->memory != NULL) return source->memory + offset;
    uint8_t *buffer = malloc(size ? size : 1);
    if (buffer == NULL) return NULL;
    uint64_t done = 0;
    while (done < size) {
        ssize_t got = pread(source->fd, buffer + done, size - done, (off_t)(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            free(buffer);
            return NULL;
        }
        done += (uint64_t)got;
    }
    *owned = buffer;
    return buffer;
}

/* The section named wanted: its offset, size and address, all checked. */
static int find_section(const struct source *source, const struct elf64_header *header, const uint8_t *sections,
                        const uint8_t *names, uint64_t names_size, const char *wanted, struct elf64_section *found) {
    size_t wanted_length = strlen(wanted);
    for (uint16_t index = 0; index < header->shnum; index++) {
        struct elf64_section section;
        memcpy(&section, sections + (uint64_t)index * sizeof section, sizeof section);
        if (section.name >= names_size || names_size - section.name < wanted_length + 1) continue;
        if (memcmp(names + section.name, wanted, wanted_length + 1) != 0) continue;
        if (section.type == SHT_NOBITS || section.offset > source->size || section.size > source->size - section.offset ||
            section.size > MAX_CFI_BYTES)
            return 0;
        *found = section;
        return 1;
    }
    return 0;
}

#define SHF_EXECINSTR 0x4
#define CLONE_GAP_MAX_BYTES 16

/* Are the two bytes at address a syscall instruction, in an executable section? */
static int is_syscall_at(const struct source *source, const struct elf64_header *header, const uint8_t *sections,
                         uint64_t address) {
    for (uint16_t index = 0; index < header->shnum; index++) {
        struct elf64_section section;
        memcpy(&section, sections + (uint64_t)index * sizeof section, sizeof section);
        if (section.type == SHT_NOBITS || !(section.flags & SHF_EXECINSTR)) continue;
        if (address < section.addr || section.size < 2 || address - section.addr > section.size - 2) continue;
        uint8_t *owned;
        const uint8_t *code = fetch(source, section.offset + (address - section.addr), 2, &owned);
        int found = code != NULL && code[0] == 0x0f && code[1] == 0x05;
        free(owned);
        return found;
    }
    return 0;
}

/* glibc's clone and clone3 end their CFI at the syscall (the child starts
 * with no frame) and the new thread's begins a few bytes on, with its return
 * address undefined. In between, the syscall's return address and the test
 * and jumps after it had no row: a walk there took a frame-pointer step from
 * rbp, garbage in code built without frame pointers, and a thread-making
 * parent spends its whole clone system call at that address. The parent's
 * rule goes on through the gap (the child, there only until its first jump,
 * is walked by the same rule: its stack's first word ends it, as the
 * frame-pointer step did). Recognised by that shape alone: a gap of at most
 * CLONE_GAP_MAX_BYTES that begins with a syscall instruction, after a rule on
 * rsp, and ends at an outermost frame's row. Returns the rows left. */
static size_t continue_through_clone_gaps(struct unwind_row *rows, size_t count, const struct source *source,
                                          const struct elf64_header *header, const uint8_t *sections) {
    size_t written = 0;
    for (size_t index = 0; index < count; index++) {
        struct unwind_row row = rows[index];
        if (row.cfa_type == CFA_GAP && written > 0 && index + 1 < count && rows[written - 1].cfa_type == CFA_RSP &&
            rows[index + 1].cfa_type == CFA_END_OF_STACK && rows[index + 1].pc - row.pc <= CLONE_GAP_MAX_BYTES &&
            is_syscall_at(source, header, sections, row.pc))
            continue; /* the row before holds on to the next row */
        rows[written++] = row;
    }
    return written;
}

static int compile_file(const struct source *source, struct unwind_row **rows_out, uint64_t *count_out,
                        struct jp_table_stats *stats, uint32_t **starts_out, uint64_t *starts_count_out) {
    uint8_t *owned_header, *owned_sections = NULL, *owned_names = NULL, *owned_cfi = NULL;
    const uint8_t *bytes = fetch(source, 0, sizeof(struct elf64_header), &owned_header);
    if (bytes == NULL) return source->size < sizeof(struct elf64_header) ? JP_NOT_ELF : JP_IO_ERROR;
    struct elf64_header header;
    memcpy(&header, bytes, sizeof header);
    free(owned_header);
    if (memcmp(header.ident,
               "\x7f"
               "ELF",
               4) != 0)
        return JP_NOT_ELF;
    if (header.ident[4] != 2 || header.ident[5] != 1 || header.machine != 62) return JP_UNSUPPORTED; /* ELF64 LE x86-64 */
    int result = JP_OK;
    if (header.shentsize != sizeof(struct elf64_section) || header.shstrndx >= header.shnum)
        return JP_OK; /* no sections: no CFI */
    const uint8_t *sections = fetch(source, header.shoff, (uint64_t)header.shnum * sizeof(struct elf64_section), &owned_sections);
    if (sections == NULL) return JP_OK;
    struct elf64_section names_section;
    memcpy(&names_section, sections + (uint64_t)header.shstrndx * sizeof names_section, sizeof names_section);
    const uint8_t *names = NULL;
    if (names_section.type != SHT_NOBITS && names_section.size <= MAX_NAMES_BYTES)
        names = fetch(source, names_section.offset, names_section.size, &owned_names);
    struct elf64_section cfi;
    int is_eh_frame = 0;
    if (names != NULL) {
        if (find_section(source, &header, sections, names, names_section.size, ".eh_frame", &cfi))
            is_eh_frame = 1;
        else if (!find_section(source, &header, sections, names, names_section.size, ".debug_frame", &cfi))
            goto out; /* no CFI: no rows */
        const uint8_t *data = fetch(source, cfi.offset, cfi.size, &owned_cfi);
        if (data == NULL) {
            result = source->memory != NULL ? JP_OK : JP_IO_ERROR;
            goto out;
        }
        struct section section = {data, cfi.size, cfi.addr, is_eh_frame};
        struct builder builder = {0};
        builder.want_starts = starts_out != NULL;
        walk_section(&section, &builder, stats);
        if (builder.out_of_memory) {
            free(builder.items);
            free(builder.starts);
            result = JP_NO_MEMORY;
            goto out;
        }
        if (starts_out != NULL) {
            *starts_out = builder.starts;
            *starts_count_out = builder.start_count;
            free(builder.items);
            goto out;
        }
        size_t count = finish_rows(&builder);
        count = continue_through_clone_gaps((struct unwind_row *)builder.items, count, source, &header, sections);
        if (count == 0) {
            free(builder.items);
            goto out;
        }
        struct unwind_row *rows = realloc(builder.items, count * sizeof *rows);
        *rows_out = rows != NULL ? rows : (struct unwind_row *)builder.items;
        *count_out = count;
    }
out:
    free(owned_cfi);
    free(owned_names);
    free(owned_sections);
    return result;
}

int jp_unwind_rows_from_memory(const uint8_t *file, uint64_t file_size, struct unwind_row **rows_out, uint64_t *count_out,
                               struct jp_table_stats *stats) {
    *rows_out = NULL;
    *count_out = 0;
    memset(stats, 0, sizeof *stats);
    struct source source = {file, -1, file_size};
    return compile_file(&source, rows_out, count_out, stats, NULL, NULL);
}

int jp_unwind_rows(int fd, struct unwind_row **rows_out, uint64_t *count_out, struct jp_table_stats *stats) {
    *rows_out = NULL;
    *count_out = 0;
    memset(stats, 0, sizeof *stats);
    struct stat info;
    if (fstat(fd, &info) != 0) return JP_IO_ERROR;
    if (!S_ISREG(info.st_mode)) return JP_NOT_ELF;
    if ((uint64_t)info.st_size > MAX_FILE_BYTES) return JP_TOO_LARGE;
    struct source source = {NULL, fd, (uint64_t)info.st_size};
    return compile_file(&source, rows_out, count_out, stats, NULL, NULL);
}

int jp_function_starts(int fd, uint32_t **starts_out, uint64_t *count_out) {
    *starts_out = NULL;
    *count_out = 0;
    struct jp_table_stats stats;
    memset(&stats, 0, sizeof stats);
    struct stat info;
    if (fstat(fd, &info) != 0) return JP_IO_ERROR;
    if (!S_ISREG(info.st_mode)) return JP_NOT_ELF;
    if ((uint64_t)info.st_size > MAX_FILE_BYTES) return JP_TOO_LARGE;
    struct source source = {NULL, fd, (uint64_t)info.st_size};
    struct unwind_row *rows = NULL;
    uint64_t count = 0;
    return compile_file(&source, &rows, &count, &stats, starts_out, count_out);
}

void jp_free(void *pointer) {
    free(pointer);
}

int jp_rows_valid(const struct unwind_row *rows, uint64_t count) {
    for (uint64_t index = 0; index < count; index++) {
        const struct unwind_row *row = &rows[index];
        if (index > 0 && row->pc <= rows[index - 1].pc) return 0;
        if (row->cfa_type > CFA_RBX || (row->saved_rules & ~(RBP_OFFSET | RBX_OFFSET | RBX_LOST)) != 0) return 0;
        if ((row->saved_rules & RBX_OFFSET) && (row->saved_rules & RBX_LOST)) return 0;
        if ((row->saved_rules & RBX_OFFSET) == 0 && row->rbx_offset != 0) return 0;
        if (row->cfa_type == CFA_PLT && (row->cfa_offset < 0 || row->cfa_offset > 31)) return 0;
        int framed = row->cfa_type == CFA_RSP || row->cfa_type == CFA_RBP || row->cfa_type == CFA_RBX;
        if (row->saved_rules != 0 && !framed) return 0;
    }
    return 1;
}
