// wedge_scenarios.test.mjs with speculative decoding on (issue 30): issue 8's scenarios
// (slow stores, prewarm loops, aborts while blocks restore, a second model under a tight
// budget, unload during traffic, every fault kind, a SIGSTOPped engine of two, one resumed
// in time) with every server drafting by n-gram lookup on every step (governor off, no
// running-count limit), so verify steps and KV roll-backs meet each fault.
process.env.WEDGE_ROUNDS ??= '1';
process.env.WEDGE_SERVE_ARGS = [process.env.WEDGE_SERVE_ARGS ?? '', '--speculative', 'ngram',
  '--num-speculative-tokens', '4', '--speculative-max-running', '0',
  '--speculative-adaptive', 'off'].join(' ').trim();
await import('./wedge_scenarios.test.mjs');
