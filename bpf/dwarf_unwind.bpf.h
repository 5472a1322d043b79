// Native code's unwinding: the rows native/unwind.c compiled from each ELF
// file's .eh_frame, and the step that finds and applies a pc's row.
#pragma once

#ifdef WITH_DWARF
// Compiled .eh_frame rows (native/unwind.c), one slice per ELF file,
// written by user space through mmap.
BPF_F_TABLE("array", u32, struct unwind_row, unwind_rows, UNWIND_ROWS, BPF_F_MMAPABLE);
BPF_ARRAY(unwind_tables, struct unwind_table, UNWIND_TABLES);
#endif

#ifdef WITH_DWARF
// The row for lookup_pc in the mapping's table, copied into *row: STEP_DONE,
// STEP_FALLBACK (none: a frame-pointer step) or STEP_PENDING (the table is
// being built). *lasting: the answer holds until the trie changes (the
// table is live: a live table's rows for a file never change).
static __always_inline int dwarf_find_row(const struct mapping_info *mapping, u64 lookup_pc, struct unwind_row *row,
                                          u8 *lasting) {
    *lasting = 0;
    u32 table_id = mapping->table_id;
    if (table_id == 0) {
        *lasting = 1; // a file without a table: user space rewrites its entry when one comes
        return STEP_FALLBACK;
    }
    struct unwind_table *table = unwind_tables.lookup(&table_id);
    if (!table) return STEP_FALLBACK;
    if (table->first_row == TABLE_PENDING) return STEP_PENDING;
    if (table->row_count == 0) return STEP_FALLBACK;
    u64 file_pc = lookup_pc - mapping->load_bias;
    if (file_pc > 0xffffffffULL) return STEP_FALLBACK;
    u32 target = (u32)file_pc;
    u32 first = table->first_row;
    u32 low = first, high = first + table->row_count;
    // Binary search for the last row at or below target: 2^SEARCH_STEPS rows
    // at most, a bound the verifier can see.
    for (int step = 0; step < SEARCH_STEPS; step++) {
        if (low >= high) break;
        u32 middle = low + (high - low) / 2;
        struct unwind_row *probe = unwind_rows.lookup(&middle);
        if (!probe) return STEP_FALLBACK;
        if (probe->pc <= target)
            low = middle + 1;
        else
            high = middle;
    }
    *lasting = 1;
    if (low == first) return STEP_FALLBACK;
    u32 found = low - 1;
    struct unwind_row *match = unwind_rows.lookup(&found);
    if (!match) {
        *lasting = 0;
        return STEP_FALLBACK;
    }
    *row = *match;
    return STEP_DONE;
}
#endif
