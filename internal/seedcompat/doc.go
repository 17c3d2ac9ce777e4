// Package seedcompat holds no code: its tests compile the Go snippets of the
// retry and error-handling design (seed 002, sections 1 to 3) against
// Backstop's packages with only import paths changed, and check that they
// behave as the design says. Section 4 (the dead-letter queue) is checked
// in package dlq.
//
// Where a snippet cannot run as printed, the test says how it differs: the
// design's names for the reader's own code (doSomething, fetchData, db) are
// stubs; snippets that redeclare a name sit in their own blocks; the HTTP
// call goes to a local server that is down instead of a host on the
// internet, and reports its 503 as an error; and a fake clock is set on the
// configs so that back-off and the breaker's timeout pass without waiting.
package seedcompat
