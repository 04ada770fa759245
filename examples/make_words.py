#!/usr/bin/env python3
"""Token data for examples/words.yaml: which language is a word?

  /usr/bin/python3 examples/make_words.py [DIR] [--per-language N] [--dict DICTDIR]
      (default: examples/data, 12000 words a language, /usr/share/dict)

The word lists of Debian's wamerican, wngerman, wfrench, witalian and wspanish
packages (scripts/setup installs them; no network needed), five classes in
this order: 0 english (american-english), 1 french, 2 german (ngerman),
3 italian, 4 spanish. Each word is lower-cased; a word with a character
outside the fixed alphabet below (apostrophes, hyphens, dots: "aardvark's",
"c'est") is dropped, as is a word longer than 16 letters (not cut: a cut word
could pass for another); a word found in two or more of the lists ("pasta",
"hotel") is dropped from all of them. Then, with a fixed seed, N words of each
language are drawn, the first 5/6 of each to train and the rest to test, and
each set is shuffled. A word is 16 ids: letter k of the alphabet is id k + 1,
0 pads the word's end. Written as NPY: words_{train,test}_x.npy (uint8
[n, 16], read as ids by an embedding, not scaled), words_{train,test}_y.npy
(int64 [n]). The same files every time from the same lists."""
import os
import sys

import numpy as np

LENGTH = 16
ALPHABET = "abcdefghijklmnopqrstuvwxyz" + "ßàáâäåçèéêëìíîïñòóôöùúûü"
LISTS = (("english", "american-english", "wamerican"), ("french", "french", "wfrench"),
         ("german", "ngerman", "wngerman"), ("italian", "italian", "witalian"),
         ("spanish", "spanish", "wspanish"))


def read_list(path):
    ids = {ch: i + 1 for i, ch in enumerate(ALPHABET)}
    with open(path, encoding="utf-8") as f:
        words = {w.strip().lower() for w in f}
    return sorted(w for w in words if 0 < len(w) <= LENGTH and all(ch in ids for ch in w))


def encode(words):
    ids = {ch: i + 1 for i, ch in enumerate(ALPHABET)}
    x = np.zeros((len(words), LENGTH), np.uint8)
    for r, w in enumerate(words):
        x[r, :len(w)] = [ids[ch] for ch in w]
    return x


def main():
    args, out, per, dicts = sys.argv[1:], None, 12000, "/usr/share/dict"
    while args:
        a = args.pop(0)
        if a == "--per-language" and args:
            per = int(args.pop(0))
        elif a == "--dict" and args:
            dicts = args.pop(0)
        elif out is None and not a.startswith("-"):
            out = a
        else:
            sys.exit(__doc__)
    out = out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    lists = []
    for lang, name, package in LISTS:
        path = os.path.join(dicts, name)
        if not os.path.exists(path):
            sys.exit(f"make_words.py: {path} is missing: install Debian's {package} "
                     "(scripts/setup does)")
        lists.append(read_list(path))
    seen = {}
    for words in lists:
        for w in words:
            seen[w] = seen.get(w, 0) + 1
    rng = np.random.default_rng(37)
    parts = {"train": ([], []), "test": ([], [])}
    n_train = per * 5 // 6
    for label, words in enumerate(lists):
        own = [w for w in words if seen[w] == 1]
        if len(own) < per:
            sys.exit(f"make_words.py: {LISTS[label][0]} has {len(own)} words of its own, "
                     f"fewer than --per-language {per}")
        pick = [own[i] for i in rng.choice(len(own), per, replace=False)]
        for part, chosen in (("train", pick[:n_train]), ("test", pick[n_train:])):
            parts[part][0].extend(chosen)
            parts[part][1].extend([label] * len(chosen))
    os.makedirs(out, exist_ok=True)
    for part, (words, labels) in parts.items():
        order = rng.permutation(len(words))
        np.save(os.path.join(out, f"words_{part}_x.npy"), encode([words[i] for i in order]))
        np.save(os.path.join(out, f"words_{part}_y.npy"), np.array(labels, np.int64)[order])
    print(f"wrote words_* to {out}: {len(parts['train'][0])} training and "
          f"{len(parts['test'][0])} test words, {len(LISTS)} languages, ids 1 to "
          f"{len(ALPHABET)} (input_dim {len(ALPHABET) + 1})")


if __name__ == "__main__":
    main()
