/* Symbols that overlap, share starts and have no size, for
 * symbolizer_test's check that Symbolize names every address as libdwfl
 * does (Symbolizer.NamesAreLibdwflsAtEveryBoundOfRealFiles). Only the
 * symbol table matters: the bytes are never run. Built as a shared object
 * (libpfm-bts/BUILD, overlap_syms). libdwfl's pick among symbols that
 * contain an address depends on their order in the table, which the
 * linker chooses (with bookworm's ld: inner_weak_first before
 * outer_global, same_start_small before same_start_big before
 * same_start_weak; `readelf -s` shows it): the comments say what libdwfl
 * picks in that order. */
        .weak   inner_weak_first
        .globl  outer_global
        .globl  same_start_big
        .globl  same_start_small
        .weak   same_start_weak
        .globl  holder_global
        .globl  label_global

        .text
/* A weak symbol inside a global one, the weak first in the table: the
 * global wins inside the weak's range too (a better binding beats a
 * closer start). */
        .type   outer_global, @function
outer_global:
        .skip   0x10
        .type   inner_weak_first, @function
inner_weak_first:
        .skip   0x10
        .size   inner_weak_first, 0x10
        .skip   0x20
        .size   outer_global, 0x40

/* Three at one start: the smaller of the two globals (first in the
 * table) stays, the weak does not beat it. */
        .type   same_start_big, @function
        .type   same_start_small, @function
        .type   same_start_weak, @function
same_start_big:
same_start_small:
same_start_weak:
        .skip   0x30
        .size   same_start_big, 0x30
        .size   same_start_small, 0x10
        .size   same_start_weak, 0x08

/* A local inside a global: the locals are not searched there. */
        .type   holder_global, @function
holder_global:
        .skip   0x08
        .type   local_inside, @function
local_inside:
        .skip   0x08
        .size   local_inside, 0x08
        .skip   0x10
        .size   holder_global, 0x20

/* Locals only, one inside another. */
        .type   local_outer, @function
local_outer:
        .skip   0x08
        .type   local_nested, @function
local_nested:
        .skip   0x08
        .size   local_nested, 0x08
        .skip   0x10
        .size   local_outer, 0x20

/* Two more pairs at one start each, of equal binding: pair_a's smaller
 * comes first in the table and stays, pair_b's bigger comes first and
 * the smaller, second, replaces it. */
        .globl  pair_a_big
        .globl  pair_a_small
        .type   pair_a_big, @function
        .type   pair_a_small, @function
pair_a_big:
pair_a_small:
        .skip   0x20
        .size   pair_a_big, 0x20
        .size   pair_a_small, 0x10
        .globl  pair_b_small
        .globl  pair_b_big
        .type   pair_b_big, @function
        .type   pair_b_small, @function
pair_b_big:
pair_b_small:
        .skip   0x20
        .size   pair_b_big, 0x20
        .size   pair_b_small, 0x10

/* Sizeless labels, global and local, and padding after them. */
label_global:
        .skip   0x10
local_label:
        .skip   0x10
        .balign 0x40
