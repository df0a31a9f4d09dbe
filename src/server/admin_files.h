// The dashboard's files (src/server/admin/), embedded at build time by
// cmake/EmbedFiles.cmake; the generated source defines admin_files().
#pragma once

#include <span>
#include <string_view>

namespace keel::server {

struct EmbeddedFile {
  std::string_view name;  // the path under src/server/admin/, e.g. "app.js"
  std::string_view bytes;
};

std::span<const EmbeddedFile> admin_files();

}  // namespace keel::server
