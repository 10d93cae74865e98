"""The trio shells: running agent trees and delivering their events."""
