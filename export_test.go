package sandbox

// ReactionTable is the reaction table itself, for the tests that check it covers every pair.
var ReactionTable = reactions()
