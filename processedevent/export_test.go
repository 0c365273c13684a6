package processedevent

// Statements are the package's named statements, for TestStatementsPrepare.
var Statements = stmts
