// An empty program linked with every object of one room's library and that room's dependencies
// alone (src/CMakeLists.txt): it links only if the room calls nothing in a room above it.
int main() {
  return 0;
}
