package postgres

// RegisterUUID and RegisterArrays are the connections' type registrations, for TestArraysBinary.
var RegisterUUID, RegisterArrays = registerUUID, registerArrays
