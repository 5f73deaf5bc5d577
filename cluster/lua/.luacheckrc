-- luacheck's configuration for the cluster's Redis scripts. A file of a
-- script's prelude defines locals that the files after it use, so a file
-- alone is no whole chunk: TestLuacheck (luascript_test.go) checks each
-- script assembled as Redis runs it, with this configuration, and names
-- each warning by the file and line it comes from.

-- Redis runs Lua 5.1 with these libraries and globals, and without io,
-- os, dofile, loadfile, require and module; it refuses to create globals.
stds.redis = {
  read_globals = {'redis', 'KEYS', 'ARGV', 'cjson', 'cmsgpack', 'bit', 'struct'},
}
std = 'lua51+redis'
not_globals = {'io', 'os', 'dofile', 'loadfile', 'require', 'module', 'package'}
max_line_length = false
