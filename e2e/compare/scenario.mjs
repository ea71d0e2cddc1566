// The scenario of the side-by-side with another web UI (docs/comparison.md): a small Python
// project in git with a failing test, and the scripted model's replies (`switchboard fake-api
// --script`) for three prompts: run the tests (a Bash call that fails), fix it (Read, Edit,
// the tests again), and explain (a long markdown answer). `makeProject(dir)` writes the
// project and returns the script's JSON for it (the tools name absolute paths).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export const PROMPTS = {
  run: 'Run the tests',
  fix: 'Fix the failing test',
  explain: 'Explain how the cart computes its total',
};

const CART = `TAX = 0.1


def subtotal(items):
    return sum(price * count for price, count in items)


def total(items):
    # BUG: the tax is left out
    return subtotal(items)
`;

const TEST = `import unittest

from cart import total


class CartTest(unittest.TestCase):
    def test_total_has_tax(self):
        self.assertEqual(total([(10, 3)]), 33.0)


if __name__ == "__main__":
    unittest.main()
`;

const EXPLANATION = `## How the cart computes its total

The total is the **subtotal** with the tax on top. \`cart.py:8\` is where it happens:

| function | takes | returns |
|---|---|---|
| \`subtotal(items)\` | a list of \`(price, count)\` pairs | the sum of price × count |
| \`total(items)\` | the same list | the subtotal with \`TAX\` added, to the cent |

\`\`\`python
def total(items):
    return round(subtotal(items) * (1 + TAX), 2)
\`\`\`

### Why the test failed

> The test expects \`33.0\` for three items at \`10\`: a subtotal of 30 and 10% tax.

Before the fix, \`total\` returned the subtotal alone (\`30\`). Rounding to the cent keeps
floating point from giving \`33.000000000000004\`.

### What to check next

1. Items with a count of zero.
2. A tax rate read from the configuration rather than a constant.
3. Prices given in cents, as integers, to avoid rounding at all.
`;

/// Writes the project into `dir` (a git repository with one commit) and returns the fake API's
/// script for it.
export function makeProject(dir) {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'cart.py'), CART);
  fs.writeFileSync(path.join(dir, 'test_cart.py'), TEST);
  fs.writeFileSync(path.join(dir, '.gitignore'), '__pycache__/\n');
  const git = (...args) => execFileSync('git', ['-C', dir, ...args], { stdio: 'ignore' });
  git('init', '-q', '-b', 'main');
  git('-c', 'user.name=Demo', '-c', 'user.email=demo@example.com', 'add', '.');
  git('-c', 'user.name=Demo', '-c', 'user.email=demo@example.com', 'commit', '-q', '-m', 'cart');
  const cart = path.join(dir, 'cart.py');
  const usage = { input_tokens: 12_000, output_tokens: 600 };
  return {
    replies: [
      { when: { prompt_contains: PROMPTS.run }, ...usage, blocks: [
        { text: 'Running the test suite.' },
        { tool_use: { name: 'Bash', input: { command: 'python3 test_cart.py', description: 'Run the tests' } } }] },
      { when: { tool_result_contains: 'AssertionError' }, ...usage, blocks: [
        { text: 'One test fails: `total()` leaves the tax out (30.0, not 33.0).' }] },
      { when: { prompt_contains: PROMPTS.fix }, ...usage, blocks: [
        { text: 'Reading the cart first.' },
        { tool_use: { name: 'Read', input: { file_path: cart } } }] },
      { when: { tool_result_contains: 'def total' }, ...usage, blocks: [
        { text: 'The tax is missing from `total`. Adding it, rounded to the cent.' },
        { tool_use: { name: 'Edit', input: { file_path: cart, old_string: '    # BUG: the tax is left out\n    return subtotal(items)', new_string: '    return round(subtotal(items) * (1 + TAX), 2)' } } }] },
      { when: { tool_result_contains: 'has been updated' }, ...usage, blocks: [
        { tool_use: { name: 'Bash', input: { command: 'python3 test_cart.py', description: 'Run the tests again' } } }] },
      { when: { tool_result_contains: 'OK' }, ...usage, blocks: [
        { text: 'Fixed: the test passes. `cart.py:8` now adds the tax.' }] },
      { when: { prompt_contains: PROMPTS.explain }, ...usage, blocks: [{ text: EXPLANATION }] },
    ],
    fallback_text: 'Nothing scripted for that.',
  };
}
