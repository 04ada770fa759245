# The one rewrite the emulation makes to the plugin's sources: a kernel launch
# `k<<<grid, block, shmem, stream>>>(args)`, which no host compiler parses,
# becomes `k * emu_launch_cfg("k", grid, block, shmem, stream)(args)`
# (include/cuda_runtime.h). #line keeps the compiler's and the sanitizers'
# file:line those of the source. Run as cmake -DIN=... -DOUT=... -P.
file(READ ${IN} text)
string(REGEX REPLACE "([A-Za-z_][A-Za-z0-9_]*)<<<" "\\1 * emu_launch_cfg(\"\\1\", " text "${text}")
string(REPLACE ">>>" ")" text "${text}")
file(WRITE ${OUT}.tmp "#line 1 \"${IN}\"\n${text}")
file(RENAME ${OUT}.tmp ${OUT})
