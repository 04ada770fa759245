# A 3-class CSV of 160 features, wide enough that a first layer of 256 units
# at batch 32 (over 1e6 multiply-adds) is split between a context's threads.
# Usage: awk -v rows=N -v seed=S -f tests/wide_csv.awk > FILE
BEGIN {
    srand(seed)
    for (i = 0; i < rows; i++) {
        c = i % 3
        line = ""
        for (j = 0; j < 160; j++)
            line = line (j ? "," : "") (rand() - 0.5 + (j % 3 == c ? 0.8 : 0))
        print line "," c
    }
}
